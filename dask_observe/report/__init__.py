"""Reports of a run: one HTML page with no JavaScript and nothing fetched.

``Run.report()`` returns a :class:`Report`; Jupyter shows its short form inline,
``save`` writes the full one.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from dask_observe.report.model import ReportData, collect
from dask_observe.report.render import render

if TYPE_CHECKING:
    from dask_observe.store import Run

__all__ = ["Report", "ReportData"]


class Report:
    """The report of one run.

    ``html`` is the full, standalone page; ``inline_html`` the shorter fragment
    that Jupyter displays (``_repr_html_``) and a notebook keeps in its output.
    """

    def __init__(self, data: ReportData) -> None:
        self.data = data

    @classmethod
    def of(cls, run: Run) -> Report:
        return cls(collect(run))

    @cached_property
    def html(self) -> str:
        return render(self.data, full=True)

    @cached_property
    def inline_html(self) -> str:
        return render(self.data, full=False)

    def _repr_html_(self) -> str:
        return self.inline_html

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the full report to ``path`` (a directory gets ``run-ID.html``)."""
        target = Path(path).expanduser()
        if target.is_dir():
            target = target / f"run-{int(self.data.summary['id'])}.html"
        target.write_text(self.html, encoding="utf-8")
        return target

    def __repr__(self) -> str:
        """The headline, for frontends that cannot show HTML (a terminal)."""
        s = self.data.summary
        failed = f", {s['n_failed']} failed" if s["n_failed"] else ""
        flags = ", ".join(f.kind for f in self.data.flags) or "none"
        partial = " (recorded partially)" if s.get("partial") else ""
        return (
            f"dask-observe: run {s['id']} {s['name']!r} {s['status']}{partial}: "
            f"{s['n_tasks']} tasks{failed} in {self.data.end - self.data.start:.2f} s; "
            f"flags: {flags}. Full report: %dask_observe report {s['id']} -o FILE"
        )
