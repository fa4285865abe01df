"""The ``dask-observe`` command: its parser (:mod:`.parser`), the commands
that read (:mod:`.reading`), those that record (:mod:`.record`) and those
that change what is kept (:mod:`.upkeep`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from dask_observe.cli.parser import build_parser
from dask_observe.plaintext import visible
from dask_observe.store import StoreError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        # Read by a pipe that closed early (`| head`): what was wanted was
        # read; no error to tell. stdout is pointed at nothing so that
        # Python's flush at exit does not fail on it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    # Unknown runs and levels, bad patterns, a report path that cannot be written.
    except (StoreError, ValueError, OSError) as e:
        # Errors name runs and paths others chose: never raw to a terminal.
        print(visible(f"dask-observe: error: {e}"), file=sys.stderr)
        return 1
    return code
