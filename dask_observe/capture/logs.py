"""Capture of log records inside a cluster process."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .text import MAX_KEY_BYTES, bounded, shippable

try:  # where tasks run
    from distributed.utils import (  # type: ignore[attr-defined]
        thread_state as thread_state,
    )
except ImportError:  # pragma: no cover (no task runs where distributed is not)
    import threading

    thread_state = threading.local()


def _level_number(name: str) -> int | None:
    """``"WARNING"`` to 30; None for a name logging does not know. (Not
    ``logging.getLevelNamesMapping``: this module runs on the cluster's Python,
    which may be 3.10.)"""
    number = logging.getLevelName(name)
    return number if isinstance(number, int) else None


def parse_levels(config: Mapping[str, Any]) -> dict[str, int]:
    """``{"distributed": "info", "": "warning"}`` to numeric levels, validated."""
    levels = {}
    for name, level in config.items():
        number = level if isinstance(level, int) else _level_number(str(level).upper())
        if number is None:
            raise ValueError(f"observe.capture.log-levels: unknown level {level!r}")
        levels[str(name)] = number
    levels.setdefault("", logging.WARNING)
    return levels


#: A log record as shipped: (time, level, logger, message, task, fields):
#: the key of the task whose thread logged it (None outside tasks), and a
#: logging call's ``extra`` fields as a JSON object (None without any).
LogTuple = tuple[float, int, str, str, "str | None", "str | None"]


def current_task() -> str | None:
    """The key of the task running on this thread (as the tasks table
    writes it), or None outside a task."""
    key = getattr(thread_state, "key", None)
    return None if key is None else task_text(key)


def task_text(key: object) -> str | None:
    """A task's key as the tasks table writes it (None for None)."""
    return None if key is None else shippable(bounded(str(key), MAX_KEY_BYTES))


#: The most of one ``extra`` value, and of all of a record's, kept.
MAX_FIELD_BYTES = 1024
MAX_FIELDS_BYTES = 8192

#: What every LogRecord holds: not ``extra`` fields. (``message`` and
#: ``asctime`` are set by a formatter that ran; ``taskName`` by asyncio, 3.12.)
_PLAIN_RECORD = logging.LogRecord("", 0, "", 0, "", (), None).__dict__
_STANDARD = frozenset(_PLAIN_RECORD) | {
    "message",
    "asctime",
    "taskName",
    "_dask_observe",
}
#: Attributes of a record with nothing extra: a plain one's and our mark.
_PLAIN = len(_PLAIN_RECORD) + 1


def extra_fields(record: logging.LogRecord) -> str | None:
    """A record's ``extra`` fields as a JSON object (values that are not
    JSON written as their repr, each bounded), or None without any: the
    structured part of ``log.warning("loaded", extra={"table": "orders"})``
    that the message itself does not say."""
    attributes = record.__dict__
    # The common record, no more attributes than a plain one and our mark:
    # nothing to build, nothing allocated (a record a collection's finalizer
    # logs must not set off the next collection).
    if len(attributes) <= _PLAIN:
        return None
    found = {
        name: value
        for name, value in attributes.items()
        if name not in _STANDARD and not name.startswith("_")
    }
    if not found:
        return None
    fields: dict[str, Any] = {}
    size = 0
    for name, value in found.items():
        if not isinstance(value, (str, int, float, bool, type(None))):
            try:
                value = repr(value)
            except Exception:
                value = f"<{type(value).__name__}>"
        if isinstance(value, str):
            value = bounded(value, MAX_FIELD_BYTES)
        name = bounded(str(name), MAX_FIELD_BYTES)
        size += len(name) + len(str(value))
        if size > MAX_FIELDS_BYTES:  # the object stays whole JSON: say what went
            fields["..."] = f"{len(found) - len(fields)} more fields not kept"
            break
        fields[name] = value
    return shippable(json.dumps(fields, ensure_ascii=False))


def as_tuple(record: logging.LogRecord) -> LogTuple:
    """A record as shipped, its traceback (if any) in the message, bounded;
    with the task of the thread that logged it and its ``extra`` fields."""
    message = record.getMessage()
    if record.exc_info:
        message += "\n" + logging.Formatter().formatException(record.exc_info)
    return (
        record.created,
        record.levelno,
        shippable(record.name),
        shippable(bounded(message)),
        current_task(),
        extra_fields(record),
    )


def _is_ours(record: logging.LogRecord) -> bool:
    """Our own noise, not the cluster talking: "Run out-of-band function
    'flush_shipped'", logged each time a recorder flushes, asks what capture
    runs or reads the profiles at a run's end; and what dask-observe itself
    logs in a process it shares with the cluster (the kernel of a
    LocalCluster's scheduler and nannies). Those lines are the recording
    tool's, shown to the user where the tool runs, not the cluster's: they
    were stored as a worker's (a live export that could not reach a collector
    gone meanwhile, in the next run's logs)."""
    name = record.name
    if name == "dask_observe" or name.startswith("dask_observe."):
        return True
    if record.msg == _UNSERIALIZABLE:
        # distributed quoting a push of ours it could not serialize (a line
        # the wire cannot carry, dropped alone and counted as it is retried):
        # the whole batch, every line of it again, as one INFO line. (A
        # record whose one argument is a mapping holds it as its args.)
        args = record.args
        message = args[0] if isinstance(args, tuple) and args else args
        return isinstance(message, dict) and message.get("op") in _OWN_OPS
    return record.msg == _RUN_MESSAGE and record.args in _OWN_CALLS


_RUN_MESSAGE = "Run out-of-band function %r"
_UNSERIALIZABLE = "Unserializable Message: %s"
_OWN_OPS = ("dask_observe_push",)
_OWN_CALLS = (("flush_shipped",), ("capture_on_scheduler",), ("profiles_since",))


def replay(
    records: Iterable[logging.LogRecord],
    levels: Mapping[str, int],
    since: float,
    until: float,
) -> list[LogTuple]:
    """The records a process logged from ``since`` until capture began at
    ``until`` (distributed keeps a node's recent records in a deque), filtered
    as :class:`CaptureHandler` filters live ones."""
    judge = CaptureHandler(levels, lambda record: None)
    return [
        as_tuple(r)
        for r in list(records)  # a copy: other threads may log meanwhile
        if since <= r.created < until
        and r.levelno >= judge.threshold(r.name)
        and not _is_ours(r)
    ]


class _AsBefore(logging.Filter):
    """Put on the process's other handlers while capture has lowered logger
    levels: lets through only what those levels let through before, so that
    capturing INFO lines changes nothing the process prints. (A cluster
    quieted to WARNING by its dask config printed every INFO line to its
    stderr while recorded: its log files, its log aggregator's bill.)"""

    def __init__(self, before: Mapping[logging.Logger, int]) -> None:
        super().__init__()
        self.before = before

    def filter(self, record: logging.LogRecord) -> bool:
        # (Not logging.getLogger, which takes logging's lock: this runs for
        # every record another handler of the process is given.)
        found = logging.Logger.manager.loggerDict.get(record.name)
        logger: logging.Logger | None = (
            found
            if isinstance(found, logging.Logger)
            else logging.getLogger(record.name)
        )
        while logger is not None:  # the effective level as it was
            level = self.before.get(logger, logger.level)
            if level:
                return record.levelno >= level
            logger = logger.parent
        return True


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
        self._as_before = _AsBefore(self._lowered)
        self._filtered: list[logging.Handler] = []
        #: The output capture's switch (``output.Lines.quiet``), set while this
        #: prints a record to stderr: the text is the record, not a new line.
        self.quiet: Any = None

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
        # propagation below a logger we are attached to: take it once. Once per
        # handler: a mark shared by all let the first capture of the process
        # hide a record from any other (a test's handler saw no ERROR line
        # while a recorded cluster lived in its process).
        # (A tuple: a JSON log formatter writes a record's extra attributes.)
        taken: tuple[int, ...] = getattr(record, "_dask_observe", ())
        if id(self) in taken:
            return
        record._dask_observe = (*taken, id(self))
        if record.levelno >= self.threshold(record.name) and not _is_ours(record):
            try:
                self.sink(as_tuple(record))
            except Exception:
                self.handleError(record)
        if not taken:  # the first capture handler to see it
            self._print_as_before(record)

    def _print_as_before(self, record: logging.LogRecord) -> None:
        """Print ``record`` to stderr where logging would have without us: a
        record that no handler of the process takes goes to logging's last
        resort. Ours on the root logger counted as one, and a user's own
        warnings stopped printing once a run was recorded (in the worker's
        log, in the notebook of a LocalCluster's scheduler)."""
        resort = logging.lastResort
        if resort is None or record.levelno < resort.level:
            return
        if not self._as_before.filter(record):  # below the level it had
            return
        found = logging.Logger.manager.loggerDict.get(record.name)
        logger: logging.Logger | None = (
            found if isinstance(found, logging.Logger) else logging.getLogger()
        )
        while logger is not None:
            for handler in logger.handlers:  # (no generator: see extra_fields)
                if not isinstance(handler, CaptureHandler):
                    return  # another handler took it
            logger = logger.parent if logger.propagate else None
        quiet = self.quiet
        if quiet is not None:  # what this prints is the record, kept already
            quiet.on = True
        try:
            resort.handle(record)
        finally:
            if quiet is not None:
                quiet.on = False

    def install(self) -> None:
        """Attach to the root logger and to every configured logger that does not
        propagate (distributed's own loggers do not), lowering their level where the
        configuration asks for more than they let through."""
        for name, level in self.levels.items():
            logger = logging.getLogger(name or None)
            if logger.getEffectiveLevel() > level:
                self._lowered.setdefault(logger, logger.level)
                logger.setLevel(level)
        if self._lowered:
            self._filter_others()
        named = [logging.getLogger(name) for name in self.levels if name]
        for logger in [logging.getLogger(), *(n for n in named if not n.propagate)]:
            if self not in logger.handlers:
                logger.addHandler(self)
                self._attached.append(logger)

    def _filter_others(self) -> None:
        """Every other handler of the process's loggers prints what it did."""
        loggers = [logging.getLogger()] + [
            logger
            for logger in list(logging.Logger.manager.loggerDict.values())
            if isinstance(logger, logging.Logger)
        ]
        for logger in loggers:
            for handler in logger.handlers:
                if handler is self or self._as_before in handler.filters:
                    continue
                handler.addFilter(self._as_before)
                self._filtered.append(handler)

    def uninstall(self) -> None:
        """Detach, and put back the levels that :meth:`install` lowered."""
        for logger in self._attached:
            logger.removeHandler(self)
        for logger, level in self._lowered.items():
            logger.setLevel(level)
        for handler in self._filtered:
            handler.removeFilter(self._as_before)
        self._attached.clear()
        self._lowered.clear()
        self._filtered.clear()
