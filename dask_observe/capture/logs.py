"""Capture of log records inside a cluster process."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

#: The level names dask config may use, in any case.
_LEVELS = logging.getLevelNamesMapping()


def parse_levels(config: Mapping[str, Any]) -> dict[str, int]:
    """``{"distributed": "info", "": "warning"}`` to numeric levels, validated."""
    levels = {}
    for name, level in config.items():
        number = level if isinstance(level, int) else _LEVELS.get(str(level).upper())
        if number is None:
            raise ValueError(f"observe.capture.log-levels: unknown level {level!r}")
        levels[str(name)] = number
    levels.setdefault("", logging.WARNING)
    return levels


#: A log record as shipped: (time, level, logger, message).
LogTuple = tuple[float, int, str, str]


def _is_own_flush(record: logging.LogRecord) -> bool:
    """The worker's "Run out-of-band function 'flush_plugin'", logged each time a
    recorder flushes: our own noise, not the user's cluster talking."""
    return record.args == ("flush_plugin",) and record.msg == _RUN_MESSAGE


_RUN_MESSAGE = "Run out-of-band function %r"


class CaptureHandler(logging.Handler):
    """Hands each record at or above its logger's configured level to ``sink``.

    ``sink`` must be cheap (a buffer append): ``emit`` runs in whatever thread logged.
    """

    def __init__(self, levels: Mapping[str, int], sink: Callable[[LogTuple], None]):
        super().__init__(level=logging.NOTSET)
        self.levels = dict(levels)
        self.sink = sink
        self._threshold: dict[str, int] = {}
        #: What install() changed, so that uninstall() leaves logging as it was.
        self._attached: list[logging.Logger] = []
        self._lowered: dict[logging.Logger, int] = {}

    def threshold(self, name: str) -> int:
        """The configured level of the longest configured prefix of ``name``."""
        found = self._threshold.get(name)
        if found is None:
            probe = name
            while probe not in self.levels:
                probe = probe.rpartition(".")[0] if "." in probe else ""
            found = self._threshold[name] = self.levels[probe]
        return found

    def emit(self, record: logging.LogRecord) -> None:
        # A record may reach this handler on two loggers when a user re-enables
        # propagation below a logger we are attached to: take it once.
        if getattr(record, "_dask_observe", False):
            return
        if record.levelno < self.threshold(record.name) or _is_own_flush(record):
            return
        record._dask_observe = True
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            self.sink((record.created, record.levelno, record.name, message))
        except Exception:
            self.handleError(record)

    def install(self) -> None:
        """Attach to the root logger and to every configured logger that does not
        propagate (distributed's own loggers do not), lowering their level where the
        configuration asks for more than they let through."""
        for name, level in self.levels.items():
            logger = logging.getLogger(name or None)
            if logger.getEffectiveLevel() > level:
                self._lowered.setdefault(logger, logger.level)
                logger.setLevel(level)
        named = [logging.getLogger(name) for name in self.levels if name]
        for logger in [logging.getLogger(), *(n for n in named if not n.propagate)]:
            if self not in logger.handlers:
                logger.addHandler(self)
                self._attached.append(logger)

    def uninstall(self) -> None:
        """Detach, and put back the levels that :meth:`install` lowered."""
        for logger in self._attached:
            logger.removeHandler(self)
        for logger, level in self._lowered.items():
            logger.setLevel(level)
        self._attached.clear()
        self._lowered.clear()
