"""Patterns a user types (the panel's filter, REST, the CLI, the API), matched
in linear time with RE2: Python's ``re`` backtracks, and a pattern like
``(a+)+$`` held the GIL, and so the whole Jupyter server, for seconds to hours.

RE2 takes Python's syntax but for backreferences and lookaround, which it
refuses with a clear error rather than running them.

Per row, RE2 through its Python binding costs a few times what ``re`` did, so a
query first keeps the rows that contain the pattern's longest required literal
(SQLite's ``instr``, in C), and RE2 tries only those: most searches of logs
name a word.
"""

from __future__ import annotations

import functools
import re
from re import _parser as parser  # type: ignore[attr-defined]
from typing import Any

#: Characters a pattern or text filter may have: enough for any log search,
#: little enough that a request cannot make one expensive by size alone.
MAX_PATTERN = 500
MAX_TEXT = 2_000


def _options() -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False  # a bad pattern is the caller's error, not a log line
    options.never_capture = True  # only whether it matches counts: faster
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


def _matcher(pattern: str) -> Any:
    """A function of text that says whether ``pattern`` is found in it: the
    binding's compiled program called directly where it has one (a quarter of
    the cost of its ``search``, which builds a match object)."""
    compiled = compile_pattern(pattern)
    program = getattr(compiled, "_regexp", None)
    try:
        from re2 import _Anchor

        anywhere = _Anchor.UNANCHORED
    except ImportError:  # another version of the binding: its public API
        program = None
    if program is None or not hasattr(program, "Match"):
        return lambda text: compiled.search(text) is not None

    def found(text: str) -> bool:
        data = text.encode("utf-8", "replace")  # a lone surrogate: no error
        return bool(program.Match(anywhere, data, 0, len(data))[0][0] != -1)

    return found


_matchers = functools.lru_cache(maxsize=64)(_matcher)


def regexp(pattern: str, text: str | None) -> bool:
    """SQLite's REGEXP operator: a case-sensitive search, anywhere in ``text``."""
    return text is not None and bool(_matchers(pattern)(text))


#: RE2 syntax that Python's parser reads as something else without an error:
#: ``[[:alpha:]]`` is a POSIX class to RE2, and to Python a class of "[:alph"
#: followed by a literal "]" (which no line of letters has).
RE2_ONLY = ("[:", "\\Q", "\\C", "\\p", "\\P", "\\x{")


def required_literal(pattern: str) -> str | None:
    r"""The longest run of plain characters that every match of ``pattern``
    contains (``"error"`` for ``r"error \d+"``), or None: a cheap filter to
    run before the pattern. Read with Python's own parser (linear, it runs
    nothing); patterns it cannot read, or that ignore case, get none."""
    if any(syntax in pattern for syntax in RE2_ONLY):
        return None  # read otherwise by Python: its literal is not RE2's
    try:
        parsed = parser.parse(pattern)
    except Exception:
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    best = ""

    def walk(items: Any) -> None:
        nonlocal best
        run: list[str] = []
        for op, value in items:
            if op is parser.LITERAL:
                run.append(chr(value))
                continue
            best = max(best, "".join(run), key=len)
            run = []
            if op is parser.SUBPATTERN and not value[1] & re.IGNORECASE:
                walk(value[-1])  # a group's own literals are required with it
            elif op in (parser.MAX_REPEAT, parser.MIN_REPEAT) and value[0] >= 1:
                walk(value[2])  # so are those of something repeated at least once
        best = max(best, "".join(run), key=len)

    walk(parsed)
    return best or None
