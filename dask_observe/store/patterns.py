"""Patterns a user types (the panel's filter, REST, the CLI, the API), matched
in linear time with RE2: Python's ``re`` backtracks, and a pattern like
``(a+)+$`` held the GIL, and so the whole Jupyter server, for seconds to hours.

RE2 takes Python's syntax but for backreferences and lookaround, which it
refuses with a clear error rather than running them.
"""

from __future__ import annotations

import functools
from typing import Any

#: Characters a pattern or text filter may have: enough for any log search,
#: little enough that a request cannot make one expensive by size alone.
MAX_PATTERN = 500
MAX_TEXT = 2_000


def _options() -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False  # a bad pattern is the caller's error, not a log line
    return options


@functools.lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2; ValueError says why it cannot be."""
    import re2

    if len(pattern) > MAX_PATTERN:
        raise ValueError(
            f"a regular expression may have at most {MAX_PATTERN} characters"
        )
    try:
        return re2.compile(pattern, _options())
    except re2.error as e:
        why = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else e
        raise ValueError(
            f"bad regular expression {pattern!r}: {why} (patterns are RE2: "
            "Python's syntax without backreferences or lookaround)"
        ) from None


def check_text(text: str) -> None:
    """A plain text filter's bound."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"a text filter may have at most {MAX_TEXT} characters")


def regexp(pattern: str, text: str | None) -> bool:
    """SQLite's REGEXP operator: a case-sensitive search, anywhere in ``text``."""
    return text is not None and compile_pattern(pattern).search(text) is not None
