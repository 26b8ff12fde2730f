"""The report's content model and its two renderers.

A report is a list of blocks, built once (``report.sections``) and rendered to Markdown
and to self-contained HTML, so the two always say the same thing. A block is a tuple whose
first element names its kind; build them with the constructors below:

    heading(level, text)   ("h", level, text)
    para(text)             ("p", text)          **bold** and `code` are rendered in both formats
    warn(text)             ("warn", text)
    items(lines)           ("list", lines)
    pre(text)              ("pre", text)        preformatted (a log tail)
    table(headers, rows)   ("table", headers, rows)
    image(name, alt)       ("img", name, alt)   a PNG written beside the report; consecutive
                                                images form one gallery in HTML
"""

from __future__ import annotations

import base64
import html
import re
from typing import Any

Block = tuple[Any, ...]


def heading(level: int, text: str) -> Block:
    return ("h", level, text)


def para(text: str) -> Block:
    return ("p", text)


def warn(text: str) -> Block:
    return ("warn", text)


def items(lines: list[str]) -> Block:
    return ("list", lines)


def pre(text: str) -> Block:
    return ("pre", text)


def table(headers: list[str], rows: list[list[Any]]) -> Block:
    return ("table", headers, rows)


def image(name: str, alt: str) -> Block:
    return ("img", name, alt)


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out.append("#" * b[1] + " " + b[2])
        elif kind == "p":
            out.append(b[1])
        elif kind == "warn":
            out.append(f"> **Warning:** {b[1]}")
        elif kind == "list":
            out.extend(f"- {item}" for item in b[1])
        elif kind == "pre":
            out.append("```\n" + b[1].rstrip("\n") + "\n```")
        elif kind == "img":
            out.append(f"![{b[2]}]({b[1]})")
        elif kind == "table":
            out.append("| " + " | ".join(_md_cell(h) for h in b[1]) + " |")
            out.append("|" + "|".join("---" for _ in b[1]) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b[2])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _inline_html(text: str) -> str:
    text = html.escape(str(text), quote=False)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1560px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;
font-size:13px;vertical-align:top}th{background:#f3f3f3}code,pre{font-family:ui-monospace,monospace;font-size:12px}
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere}
.warn{background:#fff3cd;border-left:4px solid #e0a800;padding:6px 10px}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots figure{margin:0}.plots img{max-width:none;border:1px solid #ddd}
figcaption{font-size:12px;color:#555}
"""


def render_html(blocks: list[Block], images: dict[str, bytes], title: str) -> str:
    """Self-contained HTML; consecutive images form one gallery, each shown at its natural size."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    i = 0
    while i < len(blocks):
        b = blocks[i]
        kind = b[0]
        if kind == "img":
            out.append('<div class="plots">')
            while i < len(blocks) and blocks[i][0] == "img":
                name, alt = blocks[i][1], blocks[i][2]
                data = images.get(name)
                if data is not None:
                    size = _png_size(data)
                    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
                    src = "data:image/png;base64," + base64.b64encode(data).decode()
                    out.append(f'<figure><img alt="{html.escape(alt)}" src="{src}"{dims}>'
                               f"<figcaption>{html.escape(alt)}</figcaption></figure>")
                i += 1
            out.append("</div>")
            continue
        if kind == "h":
            out.append(f"<h{b[1]}>{_inline_html(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(b[1])}</p>")
        elif kind == "warn":
            out.append(f'<p class="warn"><strong>Warning:</strong> {_inline_html(b[1])}</p>')
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in b[1]) + "</ul>")
        elif kind == "pre":
            out.append(f"<pre>{html.escape(b[1])}</pre>")
        elif kind == "table":
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in b[1])
            body = "".join("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>" for row in b[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        i += 1
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
