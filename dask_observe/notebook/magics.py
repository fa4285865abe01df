"""``%%dask_record`` and ``%dask_observe``.

Both parse with IPython's magic argument parser, so bad input raises ``UsageError``
with the usage line, as IPython's own magics do.
"""

from __future__ import annotations

import argparse
import ast
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser

from dask_observe.recording import NoClientError, Recording, resolve_client
from dask_observe.store import Run, Store, StoreError


def _open_store(path: str | None) -> Store:
    from dask_observe import open_store

    try:
        return open_store(path)
    except StoreError as e:
        raise UsageError(str(e)) from None


def _describe(run: Run) -> str:
    summary = run.summary()
    duration = summary["duration_s"]
    took = "" if duration is None else f" in {duration:.2f} s"
    failed = f", {summary['n_failed']} failed" if summary["n_failed"] else ""
    return (
        f"dask-observe: run {run.id} {run.name!r} {run.status}: "
        f"{summary['n_tasks']} tasks{failed}{took}"
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


def _record_parser() -> _Parser:
    parser = _Parser(prog="%%dask_record")
    parser.add_argument("name", nargs="?", default=None, help="the run's name")
    parser.add_argument("--no-widget", action="store_true", help="no live display")
    parser.add_argument("--no-report", action="store_true", help="no summary at end")
    parser.add_argument("--store", default=None, help="store path")
    return parser


def _observe_parser() -> _Parser:
    parser = _Parser(
        prog="%dask_observe",
        description="Control recording and read what dask-observe recorded.",
    )
    commands = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    commands.required = True
    start = commands.add_parser("start", help="start recording a run")
    start.add_argument("name", nargs="?", default="run", help="the run's name")
    start.add_argument("--store", default=None, help="store path")
    commands.add_parser("stop", help="stop the run that start began")
    status = commands.add_parser("status", help="what is being recorded, and where")
    status.add_argument("--store", default=None, help="store path")
    runs = commands.add_parser("runs", help="list recorded runs, newest first")
    runs.add_argument("--store", default=None, help="store path")
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

        Tasks submitted by the cell are tagged with the run's span. The run ends
        ``finished``, or ``failed`` when the cell raised or was interrupted; the
        summary line is printed either way unless ``--no-report``. Without a Dask
        client the cell runs unrecorded. ``--store`` defaults to ``observe.store``.
        """
        args = _RECORD_PARSER.parse_argstring(line)
        assert self.shell is not None
        name = args.name or f"cell {self.shell.execution_count}"
        try:
            client = resolve_client(None)
        except NoClientError as e:
            print(f"dask-observe: {e} The cell ran without recording.", file=sys.stderr)
            return self._run_cell(cell)

        store = _open_store(args.store)
        try:
            recording = Recording(name, client, store)
            recording.start()
            status = "failed"  # also when the cell is interrupted
            try:
                result = self._run_cell(cell)
                status = "finished"
                return result
            finally:
                run = recording.stop(status)
                if not args.no_report:
                    print(_describe(run))
        finally:
            store.close()

    def _run_cell(self, cell: str) -> Any:
        """Execute the cell in the user namespace; return its last expression."""
        assert self.shell is not None
        tree = ast.parse(self.shell.transform_cell(cell))
        last: ast.Expression | None = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        namespace = self.shell.user_ns
        exec(compile(tree, "<dask_record>", "exec"), namespace)
        if last is not None:
            return eval(compile(last, "<dask_record>", "eval"), namespace)
        return None

    # -- %dask_observe -----------------------------------------------------------
    @line_magic
    def dask_observe(self, line: str) -> Any:
        """Control recording and read what dask-observe recorded.

        Usage: %dask_observe SUBCOMMAND ...

          start [NAME] [--store PATH]   start recording a run (until stop)
          stop                          stop it
          status [--store PATH]         what is being recorded, and where
          runs [--store PATH]           the recorded runs, newest first

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
        recording = Recording(args.name, client, store)
        try:
            run = recording.start()
        except BaseException:
            store.close()
            raise
        self.recording = recording
        print(f"dask-observe: recording run {run.id} {run.name!r} until stop")

    def _observe_stop(self, args: argparse.Namespace) -> None:
        if self.recording is None:
            raise UsageError("nothing is being recorded; %dask_observe start begins")
        recording, self.recording = self.recording, None
        try:
            print(_describe(recording.stop("finished")))
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
        store = _open_store(args.store)
        try:
            print(f"store: {store.path} ({len(store.run_records())} runs)")
        finally:
            store.close()

    def _observe_runs(self, args: argparse.Namespace) -> Any:
        store = _open_store(args.store)
        try:
            return store.runs()
        finally:
            store.close()


def load(ipython: InteractiveShell) -> None:
    ipython.register_magics(ObserveMagics)


def unload(ipython: InteractiveShell) -> None:
    manager = ipython.magics_manager
    magics = manager.registry.pop("ObserveMagics", None)
    if isinstance(magics, ObserveMagics) and magics.recording is not None:
        magics._observe_stop(argparse.Namespace())
    manager.magics["line"].pop("dask_observe", None)
    manager.magics["cell"].pop("dask_record", None)
