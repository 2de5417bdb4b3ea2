"""The HTML building blocks every report section uses: escaping, tables, inline figures.

Cells passed to ``table`` are HTML already (escape text with ``escape`` first); headers and
captions are plain text and escaped here.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence

from ragbound.report.plots import REPORT_EXTRA


def escape(text: str) -> str:
    """``text`` safe inside an element or a quoted attribute."""
    return html.escape(text, quote=True)


def figure(pictures: Mapping[str, bytes], name: str, caption: str) -> str:
    """PNG ``pictures[name]`` inline (base64, no network), captioned; ``caption`` is plain text.
    Without the picture (matplotlib not installed), a line saying which extra draws it."""
    if name not in pictures:
        return (
            f"<p class='no-plot'>Plot not drawn ({escape(caption)}): matplotlib is not "
            f"installed; {escape(REPORT_EXTRA)} draws it.</p>"
        )
    encoded = base64.b64encode(pictures[name]).decode()
    return (
        f"<figure><img src='data:image/png;base64,{encoded}' alt='{escape(caption)}'>"
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def table(header: Sequence[str], rows: Sequence[Sequence[str]], table_id: str) -> str:
    """A table with plain-text ``header`` and HTML ``rows``, addressable as ``#table_id``."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        f"<table id='{escape(table_id)}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )
