"""How the report looks: inline styles (what survives a notebook's
sanitizer), its tables, how much of each list it shows, and the page a saved
report or comparison is.
"""

from __future__ import annotations

#: Inline styles, not a stylesheet: JupyterLab's sanitizer drops ``<style>`` in
#: untrusted notebooks and keeps ``style`` attributes (without ``var()``). Where
#: styles are stripped altogether (GitHub), the tables keep the layout.
STYLES = {
    "report": "font-size:13px;line-height:1.4;max-width:900px",
    "h3": "font-size:15px;margin:4px 0 8px",
    "h4": "font-size:13px;margin:14px 0 4px",
    "table": "border-collapse:collapse;font-size:12px",
    "th": "padding:2px 8px;text-align:right;border-bottom:1px solid "
    "rgba(127,127,127,0.35)",
    "cell": "padding:2px 8px;text-align:right;border-bottom:1px solid "
    "rgba(127,127,127,0.2)",
    "first": "padding:2px 8px;text-align:left;border-bottom:1px solid "
    "rgba(127,127,127,0.2)",
    "figure": "padding:3px 10px 3px 0;text-align:left;vertical-align:top",
    "value": "font-size:14px;font-weight:bold",
    "label": "font-size:11px;opacity:0.75",
    "bad": "color:#d62728",
    "flag": "border-left:4px solid #ff7f0e;padding:2px 8px;margin:4px 0",
    "flag-error": "border-left:4px solid #d62728;padding:2px 8px;margin:4px 0",
    "flag-info": "border-left:4px solid #2a7fb8;padding:2px 8px;margin:4px 0",
    "p": "margin:2px 0",
    "advice": "margin:2px 0;opacity:0.85;font-style:italic",
    "log": "text-align:left;font-family:monospace;font-size:11px;"
    "white-space:pre-wrap;vertical-align:top;padding:1px 6px",
    "WARNING": "color:#c66a00",
    "ERROR": "color:#d62728",
    "CRITICAL": "color:#d62728",
    "pre": "white-space:pre-wrap;font-size:11px;margin:2px 0;max-height:24em;"
    "overflow-y:auto;background:rgba(127,127,127,0.08)",
    "footer": "margin-top:10px;font-size:12px;opacity:0.85",
    "partial": "border-left:4px solid #ff7f0e;padding:2px 8px",
}


def style(*names: str) -> str:
    """The style attribute of these named styles."""
    return f' style="{";".join(STYLES[n] for n in names)}"'


def table(header: list[str], rows: list[list[str]]) -> str:
    """A table: first column left, the others right; cells are HTML already."""
    head = "".join(
        f"<th{style('th') if i else style('first')}>{h}</th>"
        for i, h in enumerate(header)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{style('cell') if i else style('first')}>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table{style('table')}><tr>{head}</tr>{body}</table>"


class Limits:
    """How much of each list a report shows."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.prefixes = 10_000 if full else 20
        self.memory_charts = 10_000 if full else 8
        self.log_lines = 5_000 if full else 20
        self.legend = 40 if full else 12
        self.functions = 40 if full else 10


#: A saved report's page: what JupyterLab gives the inline one (its font, a
#: light or dark page as the reader's system is), so that a file opened in a
#: browser reads the same, not in the browser's default serif. A stylesheet
#: is safe here: a file, not a notebook's sanitized output.
PAGE_STYLE = (
    "body{margin:16px auto;padding:0 16px;max-width:940px;"
    "font:13px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',"
    "Arial,sans-serif;color:#1f1f1f;background:#fff}"
    "code,pre{font-family:ui-monospace,'SFMono-Regular',Menlo,Consolas,monospace}"
    "summary{cursor:pointer}a{color:#1976d2}"
    "@media (prefers-color-scheme:dark){body{color:#e0e0e0;background:#111}"
    "a{color:#64b5f6}}"
)


def page(title: str, body: str) -> str:
    """A whole HTML page of ``body`` (a report, a comparison), styled as a
    notebook shows it; ``title`` is escaped already."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{title}</title><style>{PAGE_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )
