r"""Render a :class:`~ropesplit.report.document.Document` as self-contained HTML or Markdown.

The HTML page carries everything inline: CSS in a ``<style>`` element and
every figure as a base64 ``data:image/png`` URI, with no script and no link
to any other file or host, so it opens offline in any browser. The Markdown
file links the PNGs written beside it (``figures/...``).
"""

from __future__ import annotations

import base64
import html

from ropesplit.report.document import Document, FigureBlock, Table

__all__ = ["render_html", "render_markdown"]

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto;
       padding: 0 1rem; color: #111; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem;
       border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.85rem; }
caption { caption-side: top; text-align: left; color: #444; padding-bottom: 0.3rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
.wrap { overflow-x: auto; } figure { margin: 1.5rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9rem; color: #333; } code { font-size: 0.85rem; }
"""


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in table.rows
    )
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f'<div class="wrap"><table>{caption}<thead><tr>{head}</tr></thead>' \
           f"<tbody>{body}</tbody></table></div>"  # fmt: skip


def _html_figure(fig: FigureBlock) -> str:
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
    """One self-contained HTML page: inline CSS, figures as data URIs, no external refs."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
        _html_table(doc.header),
    ]
    for section in doc.sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts += [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
        parts += [_html_table(t) for t in section.tables]
        parts += [_html_figure(f) for f in section.figures]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _md_cell(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    lines = [f"*{table.caption}*", ""] if table.caption else []
    lines.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_markdown(doc: Document, figure_links: dict[int, str] | None = None) -> str:
    """The same document as Markdown; figure ``n`` links ``figure_links[n]`` (a PNG path)."""
    links = figure_links or {}
    parts = [f"# {doc.title}", _md_table(doc.header)]
    for section in doc.sections:
        parts.append(f"## {section.title}")
        parts += section.paragraphs
        parts += [_md_table(t) for t in section.tables]
        for fig in section.figures:
            image = f"![Figure {fig.number}: {fig.title}]({links[fig.number]})\n\n" \
                if fig.number in links else ""  # fmt: skip
            parts.append(f"{image}**Figure {fig.number}. {fig.title}.** {fig.caption}")
    return "\n\n".join(parts) + "\n"
