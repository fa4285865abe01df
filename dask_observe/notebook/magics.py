"""``%%dask_record`` and ``%dask_observe``.

Both parse with IPython's magic argument parser, so bad input raises ``UsageError``
with the usage line, as IPython's own magics do.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import logging
import shlex
import sys
from collections.abc import Iterator
from html import escape
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.getipython import get_ipython
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser

from dask_observe import subcommands
from dask_observe.analysis.compare import compare
from dask_observe.api import Run, Store, open_store
from dask_observe.notebook.discovery import Discovery
from dask_observe.notebook.polling import LiveProgress
from dask_observe.notebook.progress import TextView, WidgetView, has_widget_frontend
from dask_observe.plaintext import flag_lines, log_lines, stack_lines
from dask_observe.recording.block import STORE_ERRORS, NotRecorded, begin, end
from dask_observe.recording.lifecycle import Recording
from dask_observe.recording.prepare import prepare, warm_up
from dask_observe.recording.span import NoClientError, resolve_client
from dask_observe.store import StoreError
from dask_observe.store.outcome import status_line, tasks_text
from dask_observe.subcommands import add_reading

if TYPE_CHECKING:
    from dask_observe.api.archive import Archive

logger = logging.getLogger(__name__)


def _open_store(path: str | None, create: bool = True) -> Store:
    """The store; reading magics pass ``create=False`` (a mistyped --store is
    an error, not a new empty store)."""
    try:
        return open_store(path, create=create)
    except StoreError as e:
        raise UsageError(str(e)) from None


def _describe(run: Run) -> str:
    summary = run.summary()
    duration = summary["duration_s"]
    took = "" if duration is None else f" in {duration:.2f} s"
    return (
        f"dask-observe: run {run.id} {run.name!r} {status_line(summary)}: "
        f"{tasks_text(summary)}{took}"
    )


class _Parser(MagicArgumentParser):
    """IPython's magic parser, with the usage line in every error."""

    def __init__(self, prog: str, description: str | None = None) -> None:
        # argparse's plain formatter: IPython's prefixes the usage with "::" and a "%".
        super().__init__(
            prog=prog, description=description, formatter_class=argparse.HelpFormatter
        )

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}\n{self.format_usage().strip()}")

    def parse_argstring(self, argstring: str, *, partial: bool = False) -> Any:
        """Split as a shell would, so that ``--filter "two words"`` is one
        argument without its quotes (IPython's own splitting keeps them)."""
        try:
            argv = shlex.split(argstring)
        except ValueError as e:  # an unclosed quote
            self.error(str(e))
            raise  # error() raises; this keeps type checkers informed
        return self.parse_known_args(argv) if partial else self.parse_args(argv)


def _record_parser() -> _Parser:
    parser = _Parser(prog="%%dask_record")
    parser.add_argument("name", nargs="?", default=None, help="the run's name")
    parser.add_argument("--no-widget", action="store_true", help="no live display")
    parser.add_argument("--no-report", action="store_true", help="no summary at end")
    parser.add_argument("--store", default=None, help="store path")
    parser.add_argument(
        "--native",
        action="store_true",
        help="also profile compiled code (py-spy on each worker)",
    )
    return parser


def _store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None, help="store path")


def _observe_parser() -> _Parser:
    parser = _Parser(
        prog="%dask_observe",
        description="Control recording and read what dask-observe recorded.",
    )
    subcommands = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    subcommands.required = True
    start = subcommands.add_parser("start", help="start recording a run")
    start.add_argument("name", nargs="?", default="run", help="the run's name")
    start.add_argument("--store", default=None, help="store path")
    start.add_argument(
        "--native",
        action="store_true",
        help="also profile compiled code (py-spy on each worker)",
    )
    stop = subcommands.add_parser(
        "stop", help="stop the run that start began, and show its report"
    )
    stop.add_argument("--no-report", action="store_true", help="only the summary line")
    status = subcommands.add_parser("status", help="what is being recorded, and where")
    status.add_argument("--store", default=None, help="store path")
    reading = add_reading(subcommands, run_optional=True, extra=_store_option)
    reading["report"].add_argument(
        "-o", "--output", metavar="FILE", help="write it to FILE"
    )
    dashboard = subcommands.add_parser("dashboard", help="the scheduler's dashboard")
    dashboard.add_argument("page", nargs="?", default="status", help="e.g. workers")
    return parser


_RECORD_PARSER = _record_parser()
_OBSERVE_PARSER = _observe_parser()


@magics_class
class ObserveMagics(Magics):
    """The magics of ``%load_ext dask_observe``."""

    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell)
        #: The run that ``%dask_observe start`` began, until ``stop``.
        self.recording: Recording | None = None

    # -- %%dask_record -----------------------------------------------------------
    @cell_magic
    def dask_record(self, line: str, cell: str) -> Any:
        """Run the cell as one recorded run on the current Dask cluster.

        Usage: %%dask_record [NAME] [--no-widget] [--no-report] [--store PATH]

        Tasks submitted by the cell are tagged with the run's span. While the cell
        runs, a live display shows progress by task prefix, worker memory, flags
        and warnings (text without a widget frontend; none with ``--no-widget``).
        The run ends ``finished``, or ``failed`` when the cell raised or was
        interrupted; either way the display gives way to the run's report (the
        summary line with ``--no-report``). Inside a ``%dask_observe start``
        recording the cell's run nests: its tasks belong to both runs. Without a
        Dask client the cell runs unrecorded. ``--store`` defaults to
        ``observe.store``.
        """
        args = _RECORD_PARSER.parse_argstring(line)
        assert self.shell is not None
        name = args.name or f"cell {self.shell.execution_count}"
        try:
            client = resolve_client(None)
        except NoClientError as e:
            print(f"dask-observe: {e} The cell ran without recording.", file=sys.stderr)
            return self._run_cell(line, cell)

        try:
            recording = begin(
                name,
                client,
                args.store,
                code={"cell": cell},
                native=True if args.native else None,
            )
        except STORE_ERRORS as e:  # never stops the cell; said once, as is
            why = NotRecorded(name, str(e)).why_line()
            print(f"dask-observe: {why}", file=sys.stderr)
            return self._run_cell(line, cell)
        try:
            view = live = None
            if not args.no_widget:
                view = WidgetView(name) if has_widget_frontend() else TextView(name)
                live = LiveProgress(recording, view).start()
            status = "failed"  # also when the cell is interrupted
            try:
                result = self._run_cell(line, cell)
                status = "finished"
                return result
            finally:
                if live is not None:
                    live.stop()
                recording.report_follows = not args.no_report
                run = end(recording, status)
                if run is not None:
                    _show_end(run, view, report=not args.no_report)
        finally:
            recording.report_shown()  # shown, or never to be
            recording.store.close()

    def _run_cell(self, line: str, cell: str) -> Any:
        """Execute the cell in the user namespace; return its last expression.

        Compiled under the name IPython gives a cell (``Cell In[n]``), its
        lines numbered as the user sees them (the magic's line first): an
        error shows the cell's line and code, and its traceback starts at the
        cell, without this magic's frames or IPython's (as the same cell
        unrecorded would show it)."""
        shell = self.shell
        assert shell is not None
        code = shell.transform_cell(cell)
        # IPython drops a cell's leading blank lines: put them back, so that
        # line numbers stay the user's.
        blank = len(cell) - len(cell.lstrip("\n \t"))
        blank = cell[:blank].count("\n") - code[:blank].count("\n")
        code = "\n" * max(0, blank) + code
        shown = f"%%dask_record {line}\n{code}"
        filename = shell.compile.cache(shown, shell.execution_count, raw_code=shown)
        tree = ast.increment_lineno(ast.parse(code), 1)
        last: ast.Expression | None = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        namespace = shell.user_ns
        try:
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                return eval(compile(last, filename, "eval"), namespace)
        except BaseException as e:
            _from_the_cell(shell, e, filename)
            raise
        return None

    # -- %dask_observe -----------------------------------------------------------
    @line_magic
    def dask_observe(self, line: str) -> Any:
        """Control recording and read what dask-observe recorded.

        Usage: %dask_observe SUBCOMMAND ...

          start [NAME] [--store PATH]   start recording a run (until stop)
          stop [--no-report]            stop it, and show its report
          status [--store PATH]         what is being recorded, and where
          runs [--store PATH]           the recorded runs, newest first
          logs [RUN] [--filter TEXT] [--regex] [--worker W] [--level L]
               [--source S]             a run's log lines
          flags [RUN]                   what went wrong in a run, and why
          stacks [RUN] [--full]         where its long-running tasks waited
          profile [RUN] [--prefix P]    where its tasks spent their time
          report [RUN] [-o FILE]        a run's report, inline or to a file
          compare A B [--threshold T]   run B against run A, with ratios
          history NAME                  every run of that name, judged
          dashboard [PAGE]              a link to the scheduler's dashboard

        A run can always be named ``last``.
        """
        args = _OBSERVE_PARSER.parse_argstring(line)
        handler = getattr(self, f"_observe_{args.command}")
        return handler(args)

    def _observe_start(self, args: argparse.Namespace) -> None:
        if self.recording is not None:
            raise UsageError(
                f"run {self.recording.name!r} is being recorded already; "
                "%dask_observe stop ends it"
            )
        try:
            client = resolve_client(None)
        except NoClientError as e:
            raise UsageError(str(e)) from None
        store = _open_store(args.store)
        recording = Recording(
            args.name, client, store, native=True if args.native else None
        )
        try:
            run = recording.start()
        except BaseException:
            store.close()
            raise
        self.recording = recording
        print(f"dask-observe: recording run {run.id} {run.name!r} until stop")

    def _observe_stop(self, args: argparse.Namespace) -> Any:
        """The summary line, and the run's report as the cell's result (shown
        under it and kept in the notebook, as ``%%dask_record`` keeps one)."""
        if self.recording is None:
            raise UsageError("nothing is being recorded; %dask_observe start begins")
        recording, self.recording = self.recording, None
        try:
            run = recording.stop("finished")
            print(_describe(run))
            if getattr(args, "no_report", False):
                return None
            try:
                return run.report()
            except Exception as e:  # the run is stored; only its picture failed
                print(f"dask-observe: cannot render the report: {e}", file=sys.stderr)
                return None
        finally:
            recording.store.close()

    def _observe_status(self, args: argparse.Namespace) -> None:
        if self.recording is not None and self.recording.run is not None:
            run = self.recording.run
            print(
                f"recording run {run.id} {run.name!r} into {self.recording.store.path}"
            )
        else:
            print("not recording")
        try:
            store = _open_store(args.store, create=False)
        except UsageError as e:
            print(f"store: {e}")
            return
        try:
            print(f"store: {store.path} ({len(store.run_records())} runs)")
        finally:
            store.close()

    def _observe_runs(self, args: argparse.Namespace) -> Any:
        with _reading(args) as store:
            return store.runs()

    def _observe_logs(self, args: argparse.Namespace) -> None:
        with _reading(args) as store:
            logs = subcommands.logs(store.run(args.run), args)
        if not logs:
            print("No log lines match.")
        for line in log_lines(logs):
            print(line)

    def _observe_flags(self, args: argparse.Namespace) -> None:
        with _reading(args) as store:
            flags = subcommands.flags(store.run(args.run))
        for line in flag_lines(flags):
            print(line)

    def _observe_stacks(self, args: argparse.Namespace) -> None:
        with _reading(args) as store:
            stacks = store.run(args.run).stacks()
        for line in stack_lines(stacks, full=args.full):
            print(line)

    def _observe_profile(self, args: argparse.Namespace) -> None:
        with _reading(args) as store:
            lines = list(subcommands.profile(store.run(args.run), args.prefix))
        for line in lines:
            print(line)

    def _observe_report(self, args: argparse.Namespace) -> Any:
        with _reading(args) as store:
            run = store.run(args.run)
            report = run.report()
            if args.output:
                try:
                    path = report.save(args.output)
                except OSError as e:
                    raise UsageError(f"cannot write the report: {e}") from None
                print(f"Report of run {run.id} {run.name!r} written to {path}")
                return None
        return report

    def _observe_compare(self, args: argparse.Namespace) -> Any:
        from dask_observe.report.comparison import displayable

        with _reading(args) as store:
            compared = compare(args.a, args.b, threshold=args.threshold, store=store)
        return displayable(compared)

    def _observe_history(self, args: argparse.Namespace) -> Any:
        with _reading(args) as store:
            return store.history(args.name)

    def _observe_dashboard(self, args: argparse.Namespace) -> Any:
        from IPython.display import HTML

        try:
            client = resolve_client(None)
        except NoClientError as e:
            raise UsageError(str(e)) from None
        link = client.dashboard_link
        if not link:
            raise UsageError("this cluster serves no dashboard (is bokeh installed?)")
        url = link.rsplit("/", 1)[0] + "/" + args.page.lstrip("/")
        print(url)
        return HTML(f'<a href="{escape(url)}" target="_blank">{escape(url)}</a>')


@contextlib.contextmanager
def _reading(args: argparse.Namespace) -> Iterator[Store | Archive]:
    """The archive of ``--archive``, else the store named by ``--store``;
    unknown runs and bad filters become UsageError, as every bad argument of
    a magic."""
    try:
        store = subcommands.open_reading(
            args, lambda: _open_store(args.store, create=False)
        )
    except StoreError as e:  # no archive there, no driver for its protocol
        raise UsageError(str(e)) from None
    try:
        yield store
    except (StoreError, ValueError) as e:
        raise UsageError(str(e)) from None
    finally:
        store.close()


def _show_end(run: Run, view: WidgetView | TextView | None, *, report: bool) -> None:
    """Give the live display's place to the report; with ``report`` False, only
    take the widget away (leaving the summary line where it was)."""
    from IPython.display import Pretty, display

    shown: Any = None
    if report:
        try:
            shown = run.report()
        except Exception as e:  # the run is stored; only its picture failed
            print(f"dask-observe: cannot render the report: {e}", file=sys.stderr)
            shown = Pretty(_describe(run))
    if isinstance(view, WidgetView):
        view.replace(shown if shown is not None else Pretty(_describe(run)))
        view.close()
    elif shown is not None:
        display(shown)


def _from_the_cell(
    shell: InteractiveShell, error: BaseException, filename: str
) -> None:
    """Have IPython show ``error``'s traceback from the cell's own frame on
    (``_render_traceback_``, which IPython's ``showtraceback`` asks first)."""

    def render() -> list[str]:
        # Found when shown: an error kept and raised again later has another.
        tb, offset = error.__traceback__, 0
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        if tb is None:  # not raised through the cell: as IPython shows it
            tb, offset = error.__traceback__, 1
        found: list[str] = shell.InteractiveTB.structured_traceback(
            type(error), error, tb, tb_offset=offset
        )
        return found

    # An exception without a __dict__ (slots) keeps IPython's own rendering.
    with contextlib.suppress(AttributeError, TypeError):
        error._render_traceback_ = render  # type: ignore[attr-defined]


#: The kernel's finder of the clients its cells make (see ``discovery``).
_discovery: Discovery | None = None


def load(ipython: InteractiveShell) -> None:
    global _discovery
    ipython.register_magics(ObserveMagics)
    if _discovery is None:
        _discovery = Discovery()
        ipython.events.register("post_run_cell", _discovery)
    # The extension loads before the first recorded cell: that cell then pays
    # for its cluster's plugins only (``prepare``), once distributed is
    # imported; not before (a kernel that only reads the store never needs it).
    if "distributed" in sys.modules:
        _prepare(None)
    elif _prepare not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", _prepare)


def _stop_waiting(ipython: InteractiveShell) -> None:
    """Unhook ``_prepare`` from the cells' ends, if it is hooked."""
    if _prepare in ipython.events.callbacks["post_run_cell"]:
        ipython.events.unregister("post_run_cell", _prepare)


def _prepare(result: object) -> None:
    """``post_run_cell``: ready the first recorded block after the cell that
    imported distributed (a client's cell, usually: that cell took ~47 ms
    more, the first block ~30 ms less; ``benchmarks/README.md``)."""
    if "distributed" not in sys.modules:
        return
    ipython = get_ipython()
    if ipython is not None:
        _stop_waiting(ipython)
    try:
        prepare()
    except Exception as e:  # only a head start: the first block does it again
        logger.debug("dask-observe: cannot ready the first recorded block: %s", e)
    warm_up()  # what the first recorded cell's end and report import


def unload(ipython: InteractiveShell) -> None:
    global _discovery
    _stop_waiting(ipython)
    if _discovery is not None:
        if _discovery in ipython.events.callbacks["post_run_cell"]:
            ipython.events.unregister("post_run_cell", _discovery)
        _discovery = None
    manager = ipython.magics_manager
    magics = manager.registry.pop("ObserveMagics", None)
    if isinstance(magics, ObserveMagics) and magics.recording is not None:
        magics._observe_stop(argparse.Namespace())
    manager.magics["line"].pop("dask_observe", None)
    manager.magics["cell"].pop("dask_record", None)
