"""Bytes and seconds for people to read, and durations and sizes from config.

Reports and flags are also built in the Jupyter server, where dask may not be
importable; so these do not lean on ``dask.utils``.
"""

from __future__ import annotations

import math
import re

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_SECONDS = {
    "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
    "d": 86400.0, "w": 7 * 86400.0,
}  # fmt: skip
# The long forms dask's own parse_timedelta takes ("200 milliseconds"): the
# observe.* durations are read with this one parser, and a value dask
# config users write for distributed's settings must read here too.
for _short, _words in {
    "us": ("microsecond", "microseconds"), "ms": ("millisecond", "milliseconds"),
    "s": ("sec", "secs", "second", "seconds"), "min": ("mins", "minute", "minutes"),
    "h": ("hr", "hrs", "hour", "hours"), "d": ("day", "days"), "w": ("week", "weeks"),
}.items():  # fmt: skip
    _SECONDS.update(dict.fromkeys(_words, _SECONDS[_short]))


def format_bytes(n: float | None) -> str:
    """``1536`` -> ``"1.50 KiB"``; ``"?"`` for a missing value."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "?"
    value = float(n)
    for unit in _BYTE_UNITS:
        if abs(value) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_seconds(s: float | None) -> str:
    """A duration with a unit that suits it: ``850 us``, ``12.3 ms``, ``4.56 s``,
    ``2 min 5 s``."""
    if s is None or math.isnan(s):
        return "?"
    if s == 0:
        return "0 s"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    minutes, seconds = divmod(round(s), 60)
    if minutes < 120:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


def parse_seconds(value: str | float) -> float:
    """``"100ms"``, ``"1 s"``, ``"30d"``, ``2`` (seconds) -> seconds; ValueError
    otherwise."""
    if isinstance(value, int | float):
        return float(value)
    found = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", value)
    unit = found[2].lower() if found else ""
    if not found or unit not in ("", *_SECONDS):
        raise ValueError(
            f"not a duration: {value!r} (e.g. '100ms', '2s', '1min', '30d')"
        )
    return float(found[1]) * _SECONDS.get(unit or "s", 1.0)


_BYTES = {
    "": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


def parse_bytes(value: str | float) -> float:
    """``"100MiB"``, ``"1 GB"``, ``512`` (bytes) -> bytes; ValueError otherwise."""
    if isinstance(value, int | float):
        return float(value)
    found = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", value)
    if not found or found[2].lower() not in _BYTES:
        raise ValueError(f"not a size: {value!r} (e.g. '100MiB', '2 GB', 512)")
    return float(found[1]) * _BYTES[found[2].lower()]


def text_or_none(value: object) -> str | None:
    """A text cell of a DataFrame, or None where it is missing (None or NaN:
    pandas 3 stores missing strings as NaN)."""
    return value if isinstance(value, str) and value else None
