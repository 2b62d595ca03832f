"""Open built HTML pages in headless Chromium, network off; fail on raw maths, requests, overflow.

For each page (every ``index.html`` of a built site, and ``report/index.html``):

- Chromium runs headless with every name resolving nowhere and a proxy that
  refuses, so nothing can leave the machine; through the DevTools protocol
  (``--remote-debugging-pipe``, no extra package) every request the page
  makes is recorded, and any whose scheme is not ``file``, ``data``,
  ``blob``, ``about`` or ``chrome`` counts as leaving the machine;
- after the load event and MathJax's first typeset (where the page has
  MathJax), the visible text (``innerText``, code blocks excluded) must hold
  no raw TeX delimiter: ``\\(``, ``\\[`` or ``$$``;
- the page is loaded again at each viewport width of ``--widths`` (default
  800 and 1400 px) and must not be wider than the window: it fails when
  ``document.documentElement.scrollWidth`` exceeds the viewport
  (``clientWidth``: the window less a vertical scrollbar) or when any
  visible element (a table, most often) ends right of the viewport without
  sitting inside a box that scrolls or clips horizontally (a scrolling
  container that itself fits is fine). The outermost such elements are
  named (tag, id, classes, the start of their text, their right edge);
- a page with a first screen (``section.lead``: the report's figure and its
  verdict table) is loaded once more in a window of ``--first-screen``
  (default 1400 x 1000 px): the lead's figure and every row of its table must
  end inside the window, above its bottom edge and left of its right one, with
  no scrolling; the figure must be drawn (an ``img`` that decoded). The bottom
  of each is recorded (``PageResult.screen``) and, with ``--screenshots DIR``,
  the window is saved as a PNG there. Pages without a lead are not checked so.

Usage: ``python tools/offline_check.py PATH...`` (folders are searched for
``*.html``); exit 0 when every page passes, 1 otherwise, 2 on bad input
(no Chromium, no page). ``--json OUT`` writes one record per page;
``--widths 800,1400`` sets the widths (``--widths ''``: no width check);
``--first-screen 1400x1000`` the first screen's window (``''``: none).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome:", "chrome-error:", "devtools:")
RAW_TEX = re.compile(r"\\\(|\\\[|\$\$")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",  # the discard port: nothing listens, every request fails
    "--proxy-bypass-list=<-loopback>",
    "--allow-file-access-from-files",
    "--remote-debugging-pipe",
)
WIDTHS = (800, 1400)  # viewport widths (CSS px) every page must fit
HEIGHT = 900
FIRST_SCREEN = (1400, 1000)  # the window (CSS px) a page's lead must fit without scrolling
# what sticks out to the right once MathJax (if any) has typeset: the page's own width and
# the outermost visible elements whose box (or own text) ends right of the viewport outside
# any box that scrolls or clips horizontally (their overflow is that box's business: the box
# is checked itself)
OVERFLOW = """(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  if (document.fonts && document.fonts.ready) { await document.fonts.ready; }
  const root = document.documentElement;
  const width = root.clientWidth;
  const shown = (el) => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.height > 0 && getComputedStyle(el).visibility !== 'hidden';
  };
  const clips = (from) => {
    for (let p = from; p && p !== document.body && p !== root; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') { return true; }
    }
    return false;
  };
  const beyond = (box) => box.right + window.scrollX > width + 1;
  const wide = new Set();
  for (const el of document.body ? document.body.querySelectorAll('*') : []) {
    if (beyond(el.getBoundingClientRect()) && shown(el) && !clips(el.parentElement)) {
      wide.add(el);
    }
  }
  // text sticking out of its own box (one long word): its element is named
  const walker = document.createTreeWalker(document.body || root, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || !node.textContent.trim() || wide.has(el)) { continue; }
    range.selectNodeContents(node);
    if (beyond(range.getBoundingClientRect()) && shown(el) && !clips(el)) { wide.add(el); }
  }
  const outermost = [...wide].filter((el) => {
    for (let p = el.parentElement; p; p = p.parentElement) { if (wide.has(p)) return false; }
    return true;
  });
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + [...el.classList].slice(0, 3).map((c) => '.' + c).join('');
  return {
    width: width, inner: window.innerWidth, scroll: root.scrollWidth,
    elements: outermost.slice(0, 5).map((el) => ({
      name: name(el), table: el.tagName === 'TABLE' || !!el.querySelector('table'),
      right: Math.round(el.getBoundingClientRect().right + window.scrollX),
      text: (el.innerText || el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 40),
    })),
  };
})()"""
# the page's visible text once MathJax (if any) has typeset it; code is not maths
VISIBLE_TEXT = """(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  for (const el of document.querySelectorAll('pre, code, script, style')) {
    el.style.display = 'none';
  }
  return {
    text: document.body ? document.body.innerText : '',
    mathjax: !!(window.MathJax && MathJax.version),
    typeset: document.querySelectorAll('mjx-container').length,
  };
})()"""


HAS_LEAD = "!!document.querySelector('section.lead')"
# where the first screen's parts end, in page px, once every image has decoded: the lead's
# figure (or the line standing in for one not drawn) and each row of its table; null when
# the page has no lead section
FIRST_SCREEN_JS = """(async () => {
  if (document.fonts && document.fonts.ready) { await document.fonts.ready; }
  await Promise.all([...document.images].map((img) => img.decode().catch(() => null)));
  const lead = document.querySelector('section.lead');
  if (!lead) { return null; }
  const edges = (el) => {
    const box = el.getBoundingClientRect();
    return { bottom: Math.round(box.bottom + window.scrollY),
             right: Math.round(box.right + window.scrollX) };
  };
  const figure = lead.querySelector('figure, p.missing');
  const img = figure ? figure.querySelector('img') : null;
  return {
    width: document.documentElement.clientWidth, height: window.innerHeight,
    figure: figure ? { name: figure.tagName.toLowerCase() + (figure.id ? '#' + figure.id : ''),
                       drawn: !!(img && img.complete && img.naturalWidth > 0),
                       ...edges(figure) } : null,
    rows: [...lead.querySelectorAll('table tbody tr')].map((tr) => ({
      text: (tr.cells[0] ? tr.cells[0].innerText : '').trim().slice(0, 40), ...edges(tr) })),
  };
})()"""


@dataclass
class PageResult:
    """What one page showed: raw TeX left visible and requests that left the machine."""

    page: str
    raw_tex: list[str] = field(default_factory=list)  # the raw delimiters, in context
    external: list[str] = field(default_factory=list)  # URLs requested off the machine
    typeset: int = 0  # formulas MathJax rendered
    widths: list[int] = field(default_factory=list)  # viewport widths checked
    wide_at: list[int] = field(default_factory=list)  # those the page did not fit
    overflow: list[str] = field(default_factory=list)  # "at W px: what sticks out", per width
    # the first screen (pages with a lead): window, the figure's and each verdict row's
    # bottom and right edge in px, the screenshot's path; {} when not checked
    screen: dict[str, Any] = field(default_factory=dict)
    below: list[str] = field(default_factory=list)  # what the first screen does not show
    error: str = ""

    @property
    def ok(self) -> bool:
        return not (self.raw_tex or self.external or self.overflow or self.below or self.error)


def find_chromium() -> str | None:
    """The Chromium executable (``$CHROMIUM`` first), or None."""
    named = os.environ.get("CHROMIUM")
    if named:
        return named if shutil.which(named) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """Headless Chromium driven over the DevTools pipe (fd 3 in, fd 4 out)."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="offline-check-")
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        # above 4, so that placing them on 3 and 4 cannot overwrite one with the other
        to_r, from_w = (_high(fd) for fd in (to_r, from_w))
        # bash (dash takes single-digit descriptors only) puts the pipe ends on 3 and 4
        command = " ".join([_quote(executable), *map(_quote, FLAGS),
                            _quote(f"--user-data-dir={self.profile}"), "about:blank",
                            f"3<&{to_r}", f"4>&{from_w}"])  # fmt: skip
        self.proc = subprocess.Popen(
            [shutil.which("bash") or "/bin/bash", "-c", f"exec {command}"],
            pass_fds=(to_r, from_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(os.environ.get("OFFLINE_CHECK_LOG", os.devnull), "w"),
        )
        os.close(to_r)
        os.close(from_w)
        self._messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._from_r, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
                buffer += chunk
                *complete, buffer = buffer.split(b"\0")
                for raw in complete:
                    self._messages.put(json.loads(raw))

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Send one command and wait for its reply; events seen meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._get(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def _get(self, deadline: float, what: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0 or self.proc.poll() is not None:
            raise RuntimeError(f"Chromium gave no answer to {what}")
        try:
            return self._messages.get(timeout=min(left, 1.0))
        except queue.Empty:
            return {}

    def wait_event(self, method: str, session: str, since: int = 0) -> None:
        """Wait for event ``method`` of ``session`` (checking those already seen first, from
        the ``since``-th on)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for event in self._events[since:]:
                if event.get("method") == method and event.get("sessionId") == session:
                    return
            message = self._get(deadline, method)
            if message:
                self._events.append(message)

    def drain(self, seconds: float) -> None:
        """Collect events for ``seconds`` more (late requests)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self._events.append(self._messages.get(timeout=0.05))
            except queue.Empty:
                pass

    def requests(self, session: str) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self._events
            if e.get("sessionId") == session and e.get("method") == "Network.requestWillBeSent"
        ]

    def _load(self, page: Path, session: str, width: int | None, height: int = HEIGHT) -> None:
        """Navigate ``session`` to ``page`` at viewport ``width`` x ``height`` (width None:
        Chromium's own)."""
        if width is not None:
            self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                      "deviceScaleFactor": 1, "mobile": False}, session)  # fmt: skip
        since = len(self._events)
        self.send("Page.navigate", {"url": page.resolve().as_uri()}, session)
        self.wait_event("Page.loadEventFired", session, since)

    def _evaluate(self, expression: str, session: str) -> Any:
        shown = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                          "returnByValue": True}, session)  # fmt: skip
        if "exceptionDetails" in shown:
            details = shown["exceptionDetails"]
            raise RuntimeError(details.get("exception", {}).get("description")
                               or details.get("text", "script error"))  # fmt: skip
        return shown["result"]["value"]

    def _overflow(self, session: str, width: int) -> list[str]:
        """What sticks out to the right of the ``width`` px viewport, one line each."""
        found = self._evaluate(OVERFLOW, session)
        lines = [f"at {width} px: {'table ' if e['table'] and e['name'][:5] != 'table' else ''}"
                 f"{e['name']} {e['text']!r} ends at {e['right']} px, right of the "
                 f"{found['width']} px viewport" for e in found["elements"]]  # fmt: skip
        if found["scroll"] > found["width"] and not lines:
            lines.append(f"at {width} px: the page is {found['scroll']} px wide, wider than "
                         f"the {found['width']} px viewport")  # fmt: skip
        return lines

    def _first_screen(self, page: Path, session: str, window: tuple[int, int],
                      screenshots: Path | None) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
        """``page`` in a ``window`` (width, height): where its lead's figure and verdict rows
        end, and one line per part not shown whole without scrolling ({} and [] for a
        page with no lead); the window saved as a PNG into ``screenshots``, if given."""
        width, height = window
        self._load(page, session, width, height)
        found = self._evaluate(FIRST_SCREEN_JS, session)
        if found is None:
            return {}, []
        at = f"at {width}x{height} px"
        figure, rows = found["figure"], found["rows"]
        screen: dict[str, Any] = {"window": [width, height], "figure": figure, "rows": rows}
        below = []
        if figure is None or not figure["drawn"]:
            below.append(f"{at}: the first screen has no drawn figure")
        if not rows:
            below.append(f"{at}: the first screen has no verdict table")
        parts = ([(figure["name"], figure)] if figure else []) + [
            (f"verdict row {r['text']!r}", r) for r in rows]  # fmt: skip
        for name, part in parts:
            if part["bottom"] > found["height"]:
                below.append(f"{at}: {name} ends at {part['bottom']} px, below the "
                             f"{found['height']} px window")  # fmt: skip
            if part["right"] > found["width"]:
                below.append(f"{at}: {name} ends at {part['right']} px, right of the "
                             f"{found['width']} px window")  # fmt: skip
        if screenshots is not None:
            shot = self.send("Page.captureScreenshot", {"format": "png"}, session)
            screenshots.mkdir(parents=True, exist_ok=True)
            path = screenshots / f"{page.parent.name or 'page'}-{page.stem}-{width}x{height}.png"
            path.write_bytes(base64.b64decode(shot["data"]))
            screen["screenshot"] = str(path)
        return screen, below

    def check(self, page: Path, widths: tuple[int, ...] = WIDTHS,
              first_screen: tuple[int, int] | None = FIRST_SCREEN,
              screenshots: Path | None = None) -> PageResult:  # fmt: skip
        """Load ``page`` and report raw TeX left visible, requests off the machine, at
        each of ``widths`` what makes it wider than the window and, in the
        ``first_screen`` window, what of its lead (if any) the window does not show."""
        result = PageResult(str(page), widths=list(widths))
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        try:
            for domain in ("Network", "Page", "Runtime"):
                self.send(f"{domain}.enable", session=session)
            for width in widths:  # a fresh load per width: the layout MathJax makes for it
                self._load(page, session, width)
                lines = self._overflow(session, width)
                result.overflow += lines
                result.wide_at += [width] if lines else []
            if first_screen is not None:
                if not widths:
                    self._load(page, session, None)
                if self._evaluate(HAS_LEAD, session):  # a page without one is not loaded again
                    result.screen, result.below = self._first_screen(page, session, first_screen,
                                                                     screenshots)  # fmt: skip
            self._load(page, session, widths[0] if widths else None)
            value = self._evaluate(VISIBLE_TEXT, session)
            self.drain(0.5)
            text = value["text"]
            result.typeset = int(value["typeset"])
            result.raw_tex = [text[max(m.start() - 30, 0) : m.end() + 30].replace("\n", " ")
                              for m in RAW_TEX.finditer(text)]  # fmt: skip
            result.external = sorted(
                {u for u in self.requests(session) if not u.startswith(LOCAL_SCHEMES)}
            )
        except RuntimeError as exc:
            result.error = str(exc)
        finally:
            self.send("Target.closeTarget", {"targetId": target})
        return result

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        shutil.rmtree(self.profile, ignore_errors=True)


def _high(fd: int) -> int:
    """``fd`` moved to a descriptor number of at least 10."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def pages(paths: list[Path]) -> list[Path]:
    """Every HTML page under the given folders, and the given files, sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.html") if p.name != "404.html")
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path} does not exist")
    return found


def check_pages(paths: list[Path], executable: str | None = None,
                widths: tuple[int, ...] = WIDTHS,
                first_screen: tuple[int, int] | None = FIRST_SCREEN,
                screenshots: Path | None = None) -> list[PageResult]:  # fmt: skip
    """Open every page in one headless Chromium; one result per page (``screenshots``: a
    folder for the first screen of each page that has a lead)."""
    chromium = executable or find_chromium()
    if chromium is None:
        raise FileNotFoundError("Chromium not found (apt-get install chromium, or set CHROMIUM)")
    browser = Browser(chromium)
    try:
        return [browser.check(page, widths, first_screen, screenshots) for page in pages(paths)]
    finally:
        browser.close()


def screen_line(screen: dict[str, Any]) -> str:
    """One line: the first screen's window, where its figure and verdict rows end, the PNG."""
    width, height = screen["window"]
    figure = screen["figure"]
    parts = [f"first screen at {width}x{height} px:"]
    parts.append(f"figure bottom {figure['bottom']} px," if figure else "no figure,")
    parts.append("verdict rows' bottoms " + ", ".join(str(r["bottom"]) for r in screen["rows"])
                 + " px")  # fmt: skip
    if "screenshot" in screen:
        parts.append(f"(screenshot {screen['screenshot']})")
    return " ".join(parts)


def _widths(text: str) -> tuple[int, ...]:
    """``--widths``: comma-separated viewport widths in CSS px ('' for none)."""
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated integers, got {text!r}") from None
    if any(w < 200 for w in widths):
        raise argparse.ArgumentTypeError(f"widths must be at least 200 px, got {text!r}")
    return widths


def _window(text: str) -> tuple[int, int] | None:
    """``--first-screen``: ``WIDTHxHEIGHT`` in CSS px ('' for no first-screen check)."""
    if not text.strip():
        return None
    width, x, height = text.strip().lower().partition("x")
    if not (x and width.isdigit() and height.isdigit()) or min(int(width), int(height)) < 200:
        raise argparse.ArgumentTypeError(f"must be WIDTHxHEIGHT, each at least 200 px, "
                                         f"got {text!r}")  # fmt: skip
    return int(width), int(height)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="offline_check", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="built site folders or HTML files")
    parser.add_argument("--json", type=Path, help="write one record per page here")
    parser.add_argument("--widths", type=_widths, default=WIDTHS, metavar="W,W",
                        help="viewport widths the page must fit (default 800,1400)")  # fmt: skip
    parser.add_argument("--first-screen", type=_window, default=FIRST_SCREEN, metavar="WxH",
                        help="the window a page's lead must fit unscrolled (default "
                             "1400x1000; '' for none)")  # fmt: skip
    parser.add_argument("--screenshots", type=Path, metavar="DIR",
                        help="save each checked first screen here as a PNG")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        results = check_pages(args.paths, widths=args.widths, first_screen=args.first_screen,
                              screenshots=args.screenshots)  # fmt: skip
    except FileNotFoundError as exc:
        print(f"offline_check: error: {exc}", file=sys.stderr)
        return 2
    if not results:
        print("offline_check: error: no HTML page found", file=sys.stderr)
        return 2
    for r in results:
        status = "ok  " if r.ok else "FAIL"
        error = f", {r.error}" if r.error else ""
        fits = (f", too wide at {' and '.join(map(str, r.wide_at))} px" if r.wide_at else
                f", fits {' and '.join(map(str, r.widths))} px" if r.widths else "")  # fmt: skip
        print(f"{status} {r.page}: {r.typeset} formulas typeset, {len(r.raw_tex)} raw, "
              f"{len(r.external)} external requests{fits}{error}")  # fmt: skip
        for snippet in r.raw_tex[:3]:
            print(f"       raw TeX: ...{snippet}...")
        for url in r.external[:3]:
            print(f"       request off the machine: {url}")
        for line in r.overflow[:6]:
            print(f"       too wide {line}")
        if r.screen:
            print(f"       {screen_line(r.screen)}")
        for line in r.below[:6]:
            print(f"       not on the first screen {line}")
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
