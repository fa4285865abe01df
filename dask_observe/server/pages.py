"""The pages a main-area tab shows when what it asked for cannot be shown.

A tab JupyterLab restores after a reload asks again for what it showed: a
run that was pruned since, a cluster that went away. Jupyter's own error page
needs the scripts our tabs' sandboxes never run, and showed a blank frame;
these are static pages of ours that say what happened and what to do.
"""

from __future__ import annotations

from html import escape, unescape
from http.client import responses
from typing import Any

from tornado import web

#: A page of ours may show styles and inline images, and run nothing.
REPORT_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    # Jupyter's own rule, which this policy replaces: no other site frames it.
    "frame-ancestors 'self'"
)

#: What to do, by status, when no handler says better.
ADVICE = {
    403: "Reload JupyterLab (its login may have expired), then open it again.",
    404: "Close this tab.",
}


def error_page(status: int, message: str, advice: str) -> str:
    """A whole static page: what failed (``message``, plain text) and what
    to do (``advice``, plain text). Both are escaped here."""
    from dask_observe.report.style import page

    title = f"{status}: {responses.get(status, 'Error')}"
    body = (
        f'<div class="dobs-report"><h2>{escape(title)}</h2>'
        f"<p>{escape(message)}</p><p>{escape(advice)}</p></div>"
    )
    return page(escape(title), body)


class ErrorPages(web.RequestHandler):
    """Errors as a page of ours (see the module), under a policy that runs
    nothing. ``not_found`` says what a 404 means for this handler's pages."""

    not_found = "It is not there (any more)."

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        said = error.log_message if isinstance(error, web.HTTPError) else None
        # Messages quoting the store arrive escaped (the JSON routes carry them
        # as is): read back, then escaped once here.
        message = unescape(said) if said else responses.get(status_code, "Error")
        advice = self.not_found if status_code == 404 else ADVICE.get(status_code)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", REPORT_POLICY)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(
            error_page(status_code, message, advice or "Reload this tab to try again.")
        )
