"""Secrets redacted before anything is stored (``observe.redact``).

What a run records is shared: the inline report travels with the notebook, and
reports, Parquet, Chrome-trace and OpenTelemetry exports leave the machine.
So, as Spark does with ``spark.redaction.regex`` on config keys and
``spark.redaction.string.regex`` on values, the recorder redacts every record
before the store or a live export sees it:

- config entries whose key looks like a credential (``coiled.token``,
  ``gateway.auth.kwargs.password``) keep their key and lose their value;
- in text (log lines, exceptions and tracebacks, task keys, event data, the
  recorded code, names), values of the shapes credentials take: ``password=``
  and ``token:`` pairs, ``Authorization: Bearer/Basic``, ``user:password@`` in
  URLs, AWS access key ids, GitHub/GitLab/Slack tokens, JSON web tokens, PEM
  private key blocks.

Only the secret is replaced, by ``[redacted]``; everything else in the line is
kept as it was, and a line without a secret is kept byte for byte.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

MARKER = "[redacted]"

#: Words that make a config key, or the key of a ``key=value`` pair, a secret's
#: when the key ends with one (``DB_PASSWORD``, ``coiled.token``, ``api_key``;
#: not ``tokenize`` nor ``password_file``).
SECRET_WORDS = (
    r"secret|password|passwd|passphrase|token|credentials?|api[_-]?key|"
    r"access[_-]?key|secret[_-]?key|private[_-]?key|auth"
)

#: A value after ``key=`` / ``key: ``: quoted, or up to a space or delimiter;
#: not one already redacted, nor the scheme word of an Authorization value.
_VALUE = (
    r"""(?!["']?(?:\[redacted\]|(?:bearer|basic|digest)\b))"""
    r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s"',;&)}\]]+)"""
)


def _pair(words: str) -> str:
    """``key=value`` (``:``, ``:=``, ``=>``; quoted keys too) for keys ending
    with one of ``words``: group 1 is all but the value."""
    return rf"(?i)((?:{words})s?[\"']?\s*(?::=|=>|:|=)\s*){_VALUE}"


#: (pattern, what to keep of a match: a template of its groups, or None for
#: nothing), checked in order on text that the pre-filter let through.
TEXT_PATTERNS: tuple[tuple[str, str | None], ...] = (
    # PEM private keys, whole blocks (or what a cut line kept of one).
    (
        r"-----BEGIN[A-Z ]*PRIVATE KEY-----(?:.*?-----END[A-Z ]*PRIVATE KEY-----|.*)",
        None,
    ),
    # Authorization headers, and bearer tokens alone.
    (
        r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?)"
        r"[^\s\"',;]+",
        r"\1",
    ),
    (r"(?i)(\bbearer\s+)(?!\[redacted\])[A-Za-z0-9._~+/-]{8,}=*", r"\1"),
    # user:password@host in URLs.
    (r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@\"']+:)[^\s@/\"']+(@)", r"\1" + "\0" + r"\2"),
    # Cloud and forge tokens, by their own shapes.
    (r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[0-9A-Z]{16}\b", None),
    (r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b", None),
    (r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", None),
    (r"\bglpat-[A-Za-z0-9_-]{20,}", None),
    (r"\bxox[abposr]-[A-Za-z0-9-]{10,}", None),
    (r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+", None),
    # key=value, key: value, "key": "value", KEY = 'value' for secret keys.
    (_pair(SECRET_WORDS), r"\1"),
)

#: Text without any of these (case aside) holds no secret of the patterns
#: above: one cheap search spares most lines the patterns (a log line of
#: distributed's: ~1 us against ~18 us for the patterns' own search).
TRIGGERS = (
    "-----begin", "authorization", "bearer", "@", "akia", "asia", "agpa", "aida",
    "aroa", "anpa", "anva", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "xox", "eyj", "secret", "passw", "passphrase", "token", "credential",
    "api_key", "api-key", "apikey", "access_key", "access-key", "accesskey",
    "private_key", "private-key", "privatekey", "auth",
)  # fmt: skip


def _template(keep: str | None) -> Callable[[re.Match[str]], str]:
    """A replacement that keeps ``keep`` (``\\1`` groups; NUL marks where the
    secret stood when it is not at the end) and puts the marker in."""
    if keep is None:
        return lambda match: MARKER
    if "\0" in keep:
        before, after = keep.split("\0")
        return lambda match: match.expand(before) + MARKER + match.expand(after)
    return lambda match: match.expand(keep) + MARKER


class Redactor:
    """Redaction by one set of rules, fast for the common case: a text is
    searched for the trigger literals first (a batch of texts at once, in
    ``records``), and only one that has one goes through the patterns."""

    def __init__(
        self,
        key_words: str = SECRET_WORDS,
        patterns: Sequence[tuple[str, str | None]] = TEXT_PATTERNS,
        enabled: bool = True,
        triggers: Sequence[str] | None = TRIGGERS,
    ) -> None:
        self.enabled = enabled
        self._key = re.compile(f"(?i)(?:{key_words})s?$")
        self._patterns = tuple(patterns)
        # Extra patterns may match anything: with them every text is checked.
        # Searched in lowered text: IGNORECASE makes Python's engine leave its
        # literal fast path (17 us a line against 1.6 us, measured). Not RE2,
        # though it was 3x faster: its binding (pybind11) is called from the
        # recorder's daemon threads, and a daemon thread inside it when the
        # interpreter exits aborts the process ("FATAL: exception not
        # rethrown": pybind11 swallows the forced unwind of pthread_exit).
        self._trigger_words = tuple(t.lower() for t in triggers or ())
        self._triggers = (
            re.compile("|".join(re.escape(t) for t in self._trigger_words))
            if triggers is not None
            else None
        )

    @functools.cached_property
    def _subs(self) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
        # Compiled when a text first needs them: most runs log no secret, and
        # compiling them all cost the first recorded block ~3 ms (measured).
        return [(re.compile(p, re.DOTALL), _template(k)) for p, k in self._patterns]

    def text(self, value: str) -> str:
        """``value`` with every secret in it replaced by the marker."""
        if not self.enabled or not value:
            return value
        if self._triggers is not None and self._triggers.search(value.lower()) is None:
            return value
        redacted = value
        for pattern, replace in self._subs:
            redacted = pattern.sub(replace, redacted)
        # The very object when nothing changed: callers tell by identity.
        return value if redacted == value else redacted

    def maybe(self, value: Any) -> Any:
        """Text redacted; anything else as it is."""
        return self.text(value) if isinstance(value, str) else value

    def secret_key(self, key: str) -> bool:
        """Whether a config key (one part of a dotted one) names a secret: it
        ends with a secret word (``token``, ``db-password``; not ``tokenize``)."""
        return self.enabled and self._key.search(key) is not None

    def data(self, value: Any, *, secret: bool = False) -> Any:
        """A JSON-like value with its secrets redacted: every string by the
        text patterns, and the values of keys that name a secret (keys kept;
        booleans and None kept too: no secret is a flag)."""
        if not self.enabled:
            return value
        if isinstance(value, dict):
            return {
                k: self.data(v, secret=secret or self.secret_key(str(k)))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return type(value)(self.data(v, secret=secret) for v in value)
        if secret and value is not None and not isinstance(value, bool):
            return MARKER
        return self.maybe(value)

    def suspects(self, texts: Sequence[str]) -> set[int]:
        """The indices of ``texts`` that may hold a secret: one search of the
        triggers over all of them at once. Lowered one by one: lowering may
        change a text's length."""
        if not self.enabled:
            return set()
        if self._triggers is None:  # extra patterns: every text is a suspect
            return set(range(len(texts)))
        lowered = [t.lower() for t in texts]
        ends = list(itertools.accumulate(len(t) + 1 for t in lowered))
        joined = "\n".join(lowered)
        # A find per trigger over the whole batch (C's substring search): 1.6 us
        # a line, against 2.2 us for one regular expression of them all.
        found = set()
        for word in self._trigger_words:
            at = joined.find(word)
            while at != -1:
                found.add(bisect.bisect_right(ends, at))
                at = joined.find(word, at + 1)
        return found

    def records(self, records: Iterable[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """Pulled ``(number, wire record)`` pairs with their text redacted: log
        messages, task keys and prefixes, exceptions and tracebacks, event
        data. Metrics are numbers, and are passed as they are. The texts of a
        batch are searched together (``suspects``: most hold nothing), and a
        record is rebuilt only when something in it changed."""
        from dask_observe.capture.wire import EventRecord

        out = list(records)
        if not self.enabled:
            return out
        # (record's index, field) of every text field, and the texts.
        where: list[tuple[int, str]] = []
        texts: list[str] = []
        for i, (_, record) in enumerate(out):
            for name in _TEXT_FIELDS.get(record[0], ()):
                value = getattr(record, name)
                if value:
                    where.append((i, name))
                    texts.append(value)
            if isinstance(record, EventRecord) and record.data is not None:
                out[i] = (out[i][0], record._replace(data=self.data(record.data)))
        changed: dict[int, dict[str, str]] = {}
        for at in self.suspects(texts):
            redacted = self.text(texts[at])
            if redacted is not texts[at]:
                i, name = where[at]
                changed.setdefault(i, {})[name] = redacted
        for i, replaced in changed.items():
            out[i] = (out[i][0], out[i][1]._replace(**replaced))
        return out


#: The text fields of each kind of wire record that the cluster or its user
#: wrote (events are JSON data, redacted whole).
_TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "log": ("message",),
    "task": ("key", "prefix", "exception", "traceback"),
}


def configured() -> Redactor:
    """The redactor ``observe.redact`` asks for now: the built-in key words and
    text patterns, plus ``keys`` and ``patterns`` (regular expressions whose
    whole match is replaced); ``enabled: false`` turns it off."""
    from dask_observe import config

    settings = config.get("redact") or {}
    return _redactor(
        bool(settings.get("enabled", True)),
        tuple(str(k) for k in settings.get("keys") or ()),
        tuple(str(p) for p in settings.get("patterns") or ()),
    )


@functools.lru_cache(maxsize=8)
def _redactor(enabled: bool, keys: tuple[str, ...], extra: tuple[str, ...]) -> Redactor:
    # Checked now, with a message that names the setting: compiled lazily, a
    # bad one would fail inside the recorder's pull, and recording would pause.
    for setting, expressions in (("keys", keys), ("patterns", extra)):
        for expression in expressions:
            try:
                re.compile(expression)
            except re.error as e:
                raise ValueError(
                    f"observe.redact.{setting}: {expression!r} is not a regular "
                    f"expression ({e})"
                ) from None
    words = "|".join((SECRET_WORDS, *keys))
    patterns: list[tuple[str, str | None]] = [(p, None) for p in extra]
    if keys:  # key=value pairs of the extra keys too
        patterns.append((_pair("|".join(keys)), r"\1"))
    # Extra keys or patterns may match what the triggers do not name.
    triggers = None if extra or keys else TRIGGERS
    return Redactor(words, (*TEXT_PATTERNS, *patterns), enabled, triggers)
