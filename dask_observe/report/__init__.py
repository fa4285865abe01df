"""Reports of a run: one HTML page with no JavaScript and nothing fetched.

``Run.report()`` returns a :class:`Report`; Jupyter shows its short form inline,
``save`` writes the full one.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from dask_observe.diagnose.lead import lead
from dask_observe.export.safefiles import open_to_write
from dask_observe.report.model import ReportData, collect
from dask_observe.report.render import render
from dask_observe.store.outcome import status_line, tasks_text
from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from dask_observe.diagnose import Flag
    from dask_observe.store import RunData

__all__ = ["Report", "ReportData"]


class Report:
    """The report of one run.

    ``html`` is the full, standalone page; ``inline_html`` the shorter fragment
    that Jupyter displays (``_repr_html_``) and a notebook keeps in its output.
    """

    def __init__(self, data: ReportData) -> None:
        self.data = data

    @classmethod
    def of(cls, run: RunData, flags: list[Flag] | None = None) -> Report:
        """The report of ``run``; ``flags`` where they were judged already."""
        return cls(collect(run, flags))

    @cached_property
    def html(self) -> str:
        return render(self.data, full=True)

    @cached_property
    def inline_html(self) -> str:
        return render(self.data, full=False)

    def _repr_html_(self) -> str:
        return self.inline_html

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = True) -> Path:
        """Write the full report to ``path`` (a directory gets ``run-ID.html``);
        never through a symbolic link, over an existing file only with
        ``overwrite``."""
        target = Path(path).expanduser()
        if target.is_dir() and not target.is_symlink():
            target = target / f"run-{int(self.data.summary['id'])}.html"
        with open_to_write(target, overwrite=overwrite) as f:
            f.write(self.html)
        return target

    def __repr__(self) -> str:
        """A short summary for frontends that cannot show HTML (a terminal, a
        notebook viewer that shows text/plain): headline figures, then flags."""
        d = self.data
        s = d.summary
        partial = " (recorded partially)" if s.get("partial") else ""
        lines = [
            f"dask-observe: run {s['id']} {s['name']!r} {status_line(s)}{partial}: "
            f"{tasks_text(s)} in {d.end - d.start:.2f} s "
            f"on {d.workers} workers",
            ", ".join(
                [
                    f"{phase} {format_seconds(seconds)}"
                    for phase, seconds in d.phases.items()
                ]
                + [f"peak memory {format_bytes(d.peak_memory)}"]
                + (
                    [f"spilled {format_bytes(d.peak_spilled)}"]
                    if d.peak_spilled
                    else []
                )
            ),
        ]
        told = lead(d.flags)
        lines += [f"flag {f.kind} ({f.severity}): {f.message}" for f in told[:5]]
        if len(told) > 5:
            lines.append(f"... and {len(told) - 5} more flags")
        if not d.flags:
            lines.append("flags: none")
        lines.append(f"Full report: %dask_observe report {s['id']} -o FILE")
        return "\n".join(lines)
