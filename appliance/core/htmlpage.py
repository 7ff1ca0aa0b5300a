"""Self-contained HTML pages: the shared frame of the suite, compare and isolation reports.

A report is one file to attach to a ticket or open in any browser, offline:
CSS inline, plots as inline SVG, no script, nothing fetched (a
Content-Security-Policy says so to the browser too).  Every text that comes
from a file, a VM or the switch goes through :func:`esc`; the only markup not
built here is matplotlib's SVG, which :func:`inline_svg` strips to the
drawing and refuses if it holds anything active.
"""

from __future__ import annotations

import html
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from appliance import __version__
from appliance.core.errors import HvnetError, UsageError

NOT_MEASURED = "-"
PLOTS_PACKAGE = "hvnet-plots"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330; margin: 24px auto;
       max-width: 1150px; padding: 0 16px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #d5dae3; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #cfd5df; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #eef1f6; } td:first-child, th:first-child { text-align: left; }
table.meta td, table.meta th, table.text td, table.text th { text-align: left; }
table.meta th { width: 13em; font-weight: 600; } table.matrix td { text-align: center; min-width: 3em; }
.bad { background: #fbd9d6; font-weight: 600; } .good { background: #dcf2dc; } .warn { background: #fdf1c7; }
.unknown { background: #e6e6e6; color: #444; } .self { color: #999; }
.verdict { font-size: 16px; font-weight: 700; padding: 6px 10px; display: inline-block; border-radius: 4px; }
.note { color: #5a6270; } ul.notes { margin: 4px 0 10px; padding-left: 20px; color: #5a6270; }
.plot { margin: 8px 0 18px; } .plot svg { max-width: 100%; height: auto; display: block; }
.side { display: flex; flex-wrap: wrap; gap: 8px 20px; align-items: flex-start; }
.side > .plot { flex: 1 1 520px; max-width: 720px; margin-top: 0; }
.missing { border: 1px dashed #b7791f; background: #fffaf0; padding: 8px 12px; }
pre { background: #f5f7fa; border: 1px solid #dde2ea; padding: 8px; overflow-x: auto; font-size: 12px; }
code { font-size: 12px; } footer { margin-top: 32px; color: #6b7280; font-size: 12px; }
@media print { body { margin: 0; max-width: none; } .plot { break-inside: avoid; } }
"""


def esc(value: object) -> str:
    """Text as HTML text or attribute value: names come from files and VMs, so always escaped."""
    return html.escape(str(value), quote=True)


def cell(value: object, cls: str = "") -> str:
    return f'<td class="{esc(cls)}">{esc(value)}</td>' if cls else f"<td>{esc(value)}</td>"


def table(
    headers: Sequence[object],
    rows: Iterable[Sequence[object]],
    *,
    classes: Optional[Iterable[Sequence[str]]] = None,
    css: str = "",
) -> str:
    """A table of text cells; ``classes`` (row by row, cell by cell) colours cells by verdict."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    pairs = zip(rows, classes) if classes is not None else ((r, ()) for r in rows)
    for values, cls in pairs:
        padded = [*cls, *[""] * (len(values) - len(cls))]
        body.append("<tr>" + "".join(cell(v, c) for v, c in zip(values, padded)) + "</tr>")
    attr = f' class="{esc(css)}"' if css else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def meta_table(pairs: Iterable[tuple[str, object]]) -> str:
    """Label/value rows (the run's metadata); a value that is None was not recorded."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(NOT_MEASURED if v is None else v)}</td></tr>" for k, v in pairs)
    return f'<table class="meta"><tbody>{rows}</tbody></table>'


def notes(lines: Iterable[str]) -> str:
    items = "".join(f"<li>{esc(n)}</li>" for n in lines)
    return f'<ul class="notes">{items}</ul>' if items else ""


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def plots_missing(what: str) -> str:
    """Where matplotlib is absent: the report says what is missing and how to get it, tables still follow."""
    return (
        f'<p class="missing plots-missing">{esc(what)} not drawn: plots need matplotlib, which the '
        f"{esc(PLOTS_PACKAGE)} package provides (<code>dnf install {esc(PLOTS_PACKAGE)}</code>). "
        "The tables below are complete without it.</p>"
    )


# -- matplotlib's SVG, inline ---------------------------------------------------------------------

_PROLOGUE = re.compile(r"<\?xml[^>]*\?>|<!DOCTYPE[^>]*>|<!--.*?-->|<metadata>.*?</metadata>", re.S)
_ACTIVE = re.compile(r"<script|<foreignObject|<iframe|\son[a-z]+\s*=|javascript:|href=\"(?!#)", re.I)
_ID = re.compile(r'\bid="([^"]+)"')


def inline_svg(svg: str, prefix: str, title: str) -> str:
    """An SVG document as an element of the page: prologue, comments and metadata dropped, ids made
    unique to this plot (matplotlib names glyphs and clip paths alike in every figure)."""
    body = _PROLOGUE.sub("", svg).strip()
    if not body.startswith("<svg") or _ACTIVE.search(body):
        return f'<p class="missing">{esc(title)}: plot withheld (the drawing held more than shapes and text)</p>'
    for ident in sorted(set(_ID.findall(body)), key=len, reverse=True):
        new = f"{prefix}-{ident}"
        body = body.replace(f'id="{ident}"', f'id="{new}"')
        body = body.replace(f"url(#{ident})", f"url(#{new})").replace(f'href="#{ident}"', f'href="#{new}"')
    body = body.replace("<svg ", f'<svg role="img" aria-label="{esc(title)}" ', 1)
    return f'<figure class="plot">{body}</figure>'


# -- the page --------------------------------------------------------------------------------------


def page(title: str, sections: Iterable[str], *, subtitle: str = "") -> str:
    """The whole document: head with the CSS and the policy that nothing is fetched or run, then the sections."""
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    sub = f'<p class="note">{esc(subtitle)}</p>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
        f"<body><header><h1>{esc(title)}</h1>{sub}</header>\n"
        + "\n".join(sections)
        + f"\n<footer>written by hvnet {esc(__version__)} at {esc(made)}; "
        f"'{esc(NOT_MEASURED)}' marks a figure that was not measured.</footer></body></html>\n"
    )


def check_target(path: str, option: str = "--html") -> Path:
    """The ``--html FILE`` (or ``option`` FILE) an operator gave, refused before any work if it cannot be
    written."""
    p = Path(path)
    example = "report.xml" if option == "--junit" else "report.html"
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name (e.g. {p / example})")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{option} {path}: directory {parent} is not writable")
    return p


def write(path: Path, text: str, option: str = "--html") -> None:
    """Write the page whole: a reader (a browser, a mail attachment) never sees half a report.

    The page is written to a temporary file of an unpredictable name made beside the target with
    ``O_EXCL`` and ``O_NOFOLLOW`` (:func:`tempfile.mkstemp`), then renamed over it: a file or symlink
    planted in the directory beforehand is never opened, truncated or written through.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    except OSError as exc:
        raise HvnetError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # not mkstemp's 0600: the umask decides, as for any file
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise HvnetError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


def _umask() -> int:
    """This process's umask, read without changing it (``os.umask`` sets it, racing other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
