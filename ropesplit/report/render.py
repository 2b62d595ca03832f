r"""Render a :class:`~ropesplit.report.document.Document` as self-contained HTML or Markdown.

The HTML page carries everything inline: CSS in a ``<style>`` element and
every figure as a base64 ``data:image/png`` URI, with no script and no link
to any other file or host, so it opens offline in any browser. It never
grows wider than the window: long words and cells wrap, and every table sits
in its own horizontally scrolling box (``tools/offline_check.py`` checks at
800 and 1400 px). The first screen is the lead section (``Section.lead``): its
figure beside its table, the image no taller than the window leaves room for
(``tools/offline_check.py --first-screen`` checks it at 1400 x 1000 px); the
contents list is a narrow sticky column beside the page on wide screens and
follows the first screen on narrow ones. Long detail is collapsed in
``<details>``, a table cell's too (:class:`~ropesplit.report.document.Folded`);
a figure not drawn is a visible line saying what it needs. The Markdown file
links the PNGs written beside it (``figures/...``).
"""

from __future__ import annotations

import base64
import html

from ropesplit.report.document import (
    Cell,
    Details,
    Document,
    FigureBlock,
    Folded,
    Section,
    Table,
    cell_text,
)

__all__ = ["render_html", "render_markdown"]

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 96rem; margin: 1rem auto;
       padding: 0 1rem; color: #111; line-height: 1.45; overflow-wrap: anywhere; }
p.run { color: #444; margin: 0 0 0.6rem; font-size: 0.9rem; }
details { margin: 0.6rem 0; } summary { cursor: pointer; color: #333; }
td details { margin: 0; } td details ul { margin: 0.3rem 0 0; padding-left: 1.1rem; }
p.missing { border-left: 3px solid #d9a400; padding: 0.3rem 0.6rem; background: #fff6d9; }
nav.toc ol { columns: 2; column-gap: 2rem; margin: 0.4rem 0 0; }
nav.toc h2 { margin-top: 1rem; }
h1 { font-size: 1.6rem; margin: 0 0 0.3rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem;
       border-bottom: 1px solid #ccc; }
.lead { display: flex; flex-wrap: wrap; gap: 0 1.5rem; align-items: flex-start; }
.lead figure { margin: 0; flex: 0 1 auto; min-width: 0; }
.lead figure img { max-height: calc(100vh - 15rem); width: auto; }
.lead figcaption { width: 0; min-width: 100%; font-size: 0.8rem; line-height: 1.3; }
.lead .verdicts { flex: 1 1 20rem; min-width: 0; }
.lead .wrap { margin-top: 0; } .lead td.prose { min-width: 0; overflow-wrap: break-word; }
@media (min-width: 70rem) {  /* contents: a narrow sticky column beside the page */
  .page { display: grid; grid-template-columns: 11rem minmax(0, 1fr); column-gap: 1.5rem;
          grid-template-areas: "toc head" "toc lead" "toc main"; }
  .page > header { grid-area: head; } .page > .lead { grid-area: lead; }
  .page > main { grid-area: main; }
  nav.toc { grid-area: toc; position: sticky; top: 0; align-self: start; max-height: 100vh;
            overflow-y: auto; font-size: 0.8rem; }
  nav.toc h2 { margin-top: 0.4rem; font-size: 1rem; }
  nav.toc ol { columns: 1; padding-left: 1.4rem; }
  .lead { flex-wrap: nowrap; } .lead .verdicts { flex: 1 0 24rem; }  /* the table beside */
}
.wrap { overflow-x: auto; max-width: 100%; margin: 0.8rem 0; }
table { border-collapse: collapse; font-size: 0.85rem; overflow-wrap: normal; }
caption { caption-side: top; text-align: left; color: #444; padding-bottom: 0.3rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left;
         vertical-align: top; }
th { background: #f2f2f2; }  /* titles break at spaces and after underscores */
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.prose { min-width: 12rem; max-width: 28rem; overflow-wrap: anywhere; }
td.agrees { background: #e6f4e6; } td.disagrees { background: #fbe3e3; }
td.inconclusive { background: #fff6d9; } td.weaker { background: #fde9d2; }
figure { margin: 1.5rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9rem; color: #333; } code { font-size: 0.85rem; }
"""

# a verdict cell's class (ropesplit.claims.registry.VERDICTS; the experiments' words are a subset)
VERDICT_CLASS = {"agrees": "agrees", "disagrees": "disagrees", "inconclusive": "inconclusive",
                 "weaker than the paper": "weaker"}  # fmt: skip


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return cell in ("n/a", "-")
    return True


def _column_kinds(table: Table) -> list[str]:
    """Per column: ``num`` (every cell a number or n/a: right-aligned) or ``prose`` (left)."""
    kinds = []
    for index in range(len(table.columns)):
        cells = [cell_text(row[index]) for row in table.rows if index < len(row)]
        numeric = all(_is_number(c) for c in cells) and any(c not in ("n/a", "-") for c in cells)
        long = any(len(c) > 40 for c in cells)
        kinds.append("num" if numeric else ("prose" if long else ""))
    return kinds


def _html_cell(cell: Cell, kind: str, link: str = "") -> str:
    shown = cell_text(cell)
    classes = " ".join(c for c in (kind, VERDICT_CLASS.get(shown, "")) if c)
    text = html.escape(shown)
    if link:
        text = f'<a href="#{html.escape(link)}">{text}</a>'
    if isinstance(cell, Folded) and cell.detail:
        lines = "".join(f"<li>{html.escape(line)}</li>" for line in cell.detail)
        text = f"<details><summary>{text}</summary><ul>{lines}</ul></details>"
    return f'<td class="{classes}">{text}</td>' if classes else f"<td>{text}</td>"


def _header(title: str) -> str:
    """A column title that may break after each underscore (``lowfreq_share_k``)."""
    return html.escape(title).replace("_", "_<wbr>")


def _html_table(table: Table) -> str:
    kinds = _column_kinds(table)
    links = table.links or [""] * len(table.rows)
    head = "".join(f"<th>{_header(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(_html_cell(cell, kinds[i], links[r] if i == 0 else "")
                         for i, cell in enumerate(row)) + "</tr>"
        for r, row in enumerate(table.rows)
    )  # fmt: skip
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f'<div class="wrap"><table>{caption}<thead><tr>{head}</tr></thead>' \
           f"<tbody>{body}</tbody></table></div>"  # fmt: skip


def _missing(fig: FigureBlock) -> str:
    """The line standing in for a figure not drawn: which one, and what it needs."""
    return f"Figure {fig.number} ({fig.name}): {fig.title}, {fig.missing}."


def _html_figure(fig: FigureBlock) -> str:
    if fig.missing:
        return f'<p class="missing" id="figure-{fig.number}">{html.escape(_missing(fig))}</p>'
    data = base64.b64encode(fig.png).decode("ascii")
    alt = html.escape(f"Figure {fig.number}: {fig.title}")
    files = (" Files: " + ", ".join(f"<code>{html.escape(f)}</code>" for f in fig.files) + "."
             if fig.files else "")  # fmt: skip
    return (
        f'<figure id="figure-{fig.number}"><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption><b>Figure {fig.number}. {html.escape(fig.title)}.</b> "
        f"{html.escape(fig.caption)}{files}</figcaption></figure>"
    )


def render_html(doc: Document) -> str:
    """One self-contained HTML page: inline CSS, figures as data URIs, no external refs.

    The title and run line, then the lead sections (the first screen), the contents (a
    sticky column beside the rest on a wide window, below the first screen on a narrow
    one) and every other section."""
    run = f'<p class="run">{html.escape(doc.run_line)}</p>' if doc.run_line else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
        f'<div class="page"><header><h1>{html.escape(doc.title)}</h1>{run}</header>',
    ]
    parts += [_html_lead(s) for s in doc.sections if s.lead]
    toc = [s for s in doc.sections if s.anchor and not s.lead]
    if toc:
        items = "".join(f'<li><a href="#{html.escape(s.anchor)}">{html.escape(s.title)}</a></li>'
                        for s in toc)  # fmt: skip
        parts.append(f'<nav class="toc"><h2>Contents</h2><ol>{items}</ol></nav>')
    parts.append("<main>")
    for section in doc.sections:
        if not section.lead:
            parts += _html_section(section)
    parts.append("</main></div></body></html>")
    return "\n".join(parts) + "\n"


def _html_lead(section: Section) -> str:
    """The first screen: the section's figures, and beside them its text and tables; its
    title names the region (no heading: the page's title is the first screen's)."""
    anchor = f' id="{html.escape(section.anchor)}"' if section.anchor else ""
    inner = [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
    inner += [_html_table(t) for t in section.tables]
    inner += [_html_details(d) for d in section.details]
    return (f'<section class="lead"{anchor} aria-label="{html.escape(section.title)}">'
            + "".join(_html_figure(f) for f in section.figures)
            + f'<div class="verdicts">{"".join(inner)}</div></section>')  # fmt: skip


def _html_details(details: Details) -> str:
    inner = [f"<p>{html.escape(p)}</p>" for p in details.paragraphs]
    inner += [_html_table(t) for t in details.tables]
    return (f"<details><summary>{html.escape(details.summary)}</summary>" + "".join(inner)
            + "</details>")  # fmt: skip


def _html_section(section: Section) -> list[str]:
    anchor = f' id="{html.escape(section.anchor)}"' if section.anchor else ""
    parts = [f"<h2{anchor}>{html.escape(section.title)}</h2>"]
    parts += [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
    parts += [_html_table(t) for t in section.tables]
    parts += [_html_details(d) for d in section.details]
    parts += [_html_figure(f) for f in section.figures]
    return parts


def _md_cell(cell: Cell) -> str:
    text = cell_text(cell)
    if isinstance(cell, Folded) and cell.detail:  # GitHub folds these inside a table too
        text = (f"<details><summary>{html.escape(text)}</summary>"
                f"{html.escape('; '.join(cell.detail))}</details>")  # fmt: skip
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    lines = [f"*{table.caption}*", ""] if table.caption else []
    links = table.links or [""] * len(table.rows)
    lines.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if k == "num" else "---" for k in _column_kinds(table))
                 + "|")  # fmt: skip
    for row, link in zip(table.rows, links, strict=True):
        cells = [_md_cell(c) for c in row]
        if link and cells:
            cells[0] = f"[{cells[0]}](#{link})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(doc: Document, figure_links: dict[int, str] | None = None) -> str:
    """The same document as Markdown; figure ``n`` links ``figure_links[n]`` (a PNG path).
    The lead sections come first, without a heading, then the contents and the rest."""
    links = figure_links or {}
    parts = [f"# {doc.title}"] + ([f"*{doc.run_line}*"] if doc.run_line else [])
    leads = [s for s in doc.sections if s.lead]
    toc = [s for s in doc.sections if s.anchor and not s.lead]
    for section in leads:
        parts += _md_section(section, links)
    if toc:
        parts.append("\n".join(f"{n}. [{s.title}](#{s.anchor})" for n, s in enumerate(toc, 1)))
    for section in doc.sections:
        if not section.lead:
            parts += _md_section(section, links)
    return "\n\n".join(parts) + "\n"


def _md_section(section: Section, links: dict[int, str]) -> list[str]:
    """One section's Markdown blocks (a lead section's without its heading)."""
    parts = []
    if section.anchor:
        parts.append(f'<a id="{section.anchor}"></a>')
    if not section.lead:
        parts.append(f"## {section.title}")
    parts += section.paragraphs
    parts += [_md_table(t) for t in section.tables]
    for details in section.details:  # GitHub and most viewers fold these too
        parts += [f"<details><summary>{html.escape(details.summary)}</summary>",
                  *details.paragraphs, *(_md_table(t) for t in details.tables),
                  "</details>"]  # fmt: skip
    for fig in section.figures:
        if fig.missing:
            parts.append(f"*{_missing(fig)}*")
            continue
        image = f"![Figure {fig.number}: {fig.title}]({links[fig.number]})\n\n" \
            if fig.number in links else ""  # fmt: skip
        parts.append(f"{image}**Figure {fig.number}. {fig.title}.** {fig.caption}")
    return parts
