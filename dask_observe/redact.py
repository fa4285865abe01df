"""Secrets redacted before anything is stored (``observe.redact``).

What a run records is shared: the inline report travels with the notebook, and
reports, Parquet, Chrome-trace and OpenTelemetry exports leave the machine.
So, as Spark does with ``spark.redaction.regex`` on config keys and
``spark.redaction.string.regex`` on values, the recorder redacts every record
before the store or a live export sees it:

- config entries whose key looks like a credential (``coiled.token``,
  ``gateway.auth.kwargs.password``) keep their key and lose their value;
- storage options (``observe.archive-options``, any ``storage_options``) are
  not recorded at all (``NOT_RECORDED``), and lose every value where an older
  run kept them;
- in text (log lines, exceptions and tracebacks, task keys, event data, the
  recorded code, names), values of the shapes credentials take: ``key=value``
  pairs whose key names a secret (in code, config files, connection strings,
  XML; bracketed and quoted values whole), ``--password VALUE`` flags,
  ``Authorization`` and ``Cookie`` headers, userinfo in URLs, signatures in
  signed URLs, vendor tokens (cloud, forge, chat, AI and package registries),
  JSON web tokens, PEM private key blocks.

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

from dask_observe import config
from dask_observe.capture.wire import EventRecord

MARKER = "[redacted]"

#: Words that make a config key, or the key of a ``key=value`` pair, a secret's
#: when the key ends with one (``DB_PASSWORD``, ``coiled.token``, ``api_key``,
#: ``AccountKey``; not ``tokenize`` nor ``password_file``). ``pwd`` only after a
#: separator (a bare ``PWD`` is the shell's working directory), ``pass`` alone
#: or after one (not ``bypass``).
SECRET_WORDS = (
    r"secret|password|passwd|passphrase|\bpass|[_.-]pass|[_.-]pwd|token|"
    r"credentials?|auth|"
    r"(?:api|access|secret|private|account|shared|signing|encryption|master)"
    r"[_-]?key|connection[_-]?string|conn[_-]?str|signature|cookie|"
    r"session[_-]?(?:id|key)"
)

#: Config subtrees never recorded at all, keys or values: the archive's own
#: storage options and any fsspec ``storage_options`` hold credentials in
#: shapes no key name tells (an Azure ``connection_string``, ``client_kwargs``).
NOT_RECORDED = re.compile(
    r"(?i)(?:^|\.)(?:observe\.archive-options|[\w-]*storage[_-]options)(?:\.|$)"
)

#: A value after ``key=`` / ``key: ``: a bracketed one whole (a list, a dict,
#: black's parentheses around a string wrapped over lines), a quoted one with
#: any Python string prefix (``b"..."``, ``r'...'``, triple quotes), or up to
#: a space or delimiter; not one already redacted, nor the scheme word of an
#: Authorization value (``Basic abc``; ``basic-abc`` is a value).
_VALUE = (
    r"""(?!["']?(?:\[redacted\]|(?:bearer|basic|digest)\s))"""
    r"""(?:\([^()]{0,4096}\)|\[[^\[\]]{0,4096}\]|\{[^{}]{0,4096}\}"""
    r"""|[bBrRuUfF]{0,2}(?:"{3}[\s\S]{0,4096}?"{3}|'{3}[\s\S]{0,4096}?'{3}"""
    r"""|"[^"\n]*"|'[^'\n]*')"""
    r"""|[^\s"',;&)}\]]+)"""
)


def _pair(words: str) -> str:
    """``key=value`` (``:``, ``:=``, ``=>``; quoted keys too) for keys ending
    with one of ``words``: group 1 is all but the value."""
    return rf"(?i)((?:{words})s?[\"']?\s*(?::=|=>|:|=)\s*){_VALUE}"


#: Command-line flags that take a secret as their next word (``psql
#: --password PW``, ``openssl -pass pass:PW``); ``--password=PW`` is a pair.
_FLAG = (
    r"(?i)((?:^|\s)--?(?:password|passwd|pass|pwd|token|secret|api-key|apikey|"
    r"access-key|secret-key|auth-token|client-secret|private-key)\s+)"
    r"""(?!-)(?:"[^"\n]*"|'[^'\n]*'|\S+)"""
)

#: Vendor token shapes, whole match replaced (written from the shapes that
#: public secret-scanning rule sets document: gitleaks, detect-secrets).
VENDOR_TOKENS = (
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[0-9A-Z]{16}\b",  # AWS key ids
    r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b",  # GitHub
    r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
    r"\bgl(?:pat|ptt|dt|rt|cbt|soat|ft|agent)-[A-Za-z0-9_-]{20,}",  # GitLab
    r"\bxox[abposre]-[A-Za-z0-9-]{10,}",  # Slack
    r"\bxapp-\d-[A-Za-z0-9-]{10,}",
    r"hooks\.slack\.com/services/[A-Za-z0-9/_-]+",
    r"discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]+",
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+",  # JWT
    r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"\bsk-(?:proj|svcacct|admin|ant(?:-[a-z]+\d*)?)-[A-Za-z0-9_-]{20,}",  # OpenAI
    r"\bsk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}\b",  # OpenAI, older keys
    r"\b[sr]k_(?:live|test)_[0-9A-Za-z]{16,}",  # Stripe
    r"\bAIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"\bya29\.[0-9A-Za-z_-]{20,}",  # Google OAuth access tokens
    r"\bnpm_[A-Za-z0-9]{36}\b",  # npm
    r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",  # PyPI
    r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b",  # SendGrid
    r"\bdo[por]_v1_[a-f0-9]{64}\b",  # DigitalOcean
    r"\bdapi[a-f0-9]{32}(?:-\d)?\b",  # Databricks
    r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",  # Shopify
    r"\bATATT3[A-Za-z0-9_=-]{50,}",  # Atlassian
    r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",  # age
)

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
    # Cookies: the whole header value (every name=value in it).
    (r"(?i)(\b(?:set-)?cookie[\"']?\s*[:=]\s*[\"']?)(?!\[redacted\])[^\n\"']+", r"\1"),
    # Passwords in URLs (an empty user too: redis://:PW@host), and a user
    # alone long enough to be a token (https://TOKEN@host).
    (r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@\"']*:)[^\s@/\"']+(@)", r"\1" + "\0" + r"\2"),
    (
        r"(?i)(\b[a-z][a-z0-9+.-]*://)(?!\[redacted\])[A-Za-z0-9._~%+-]{20,}(@)",
        r"\1" + "\0" + r"\2",
    ),
    # Signed URLs: SAS and presigned signatures and credentials in queries.
    (
        r"(?i)([?&](?:sig|signature|x-amz-signature|x-amz-credential|"
        r"x-amz-security-token|x-goog-signature|x-goog-credential|access_token)=)"
        r"(?!\[redacted\])[^&\s\"'#]+",
        r"\1",
    ),
    *((pattern, None) for pattern in VENDOR_TOKENS),
    # <password>value</password> in XML.
    (
        rf"(?i)(<[\w:.-]*(?:{SECRET_WORDS})s?>)(?!\[redacted\])[^<]{{1,4096}}(?=</)",
        r"\1",
    ),
    # --password VALUE on command lines.
    (_FLAG, r"\1"),
    # key=value, key: value, "key": "value", KEY = 'value' for secret keys.
    (_pair(SECRET_WORDS), r"\1"),
)

#: Text without any of these (case aside) holds no secret of the patterns
#: above: one cheap search spares most lines the patterns (a log line of
#: distributed's: ~1 us against ~18 us for the patterns' own search).
TRIGGERS = (
    "-----begin", "authorization", "bearer", "@", "akia", "asia", "agpa", "aida",
    "aroa", "anpa", "anva", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "glsoat-", "glft-",
    "glagent-", "xox", "xapp-", "hooks.slack", "webhooks", "eyj", "secret",
    "pass", "pwd", "token", "credential", "auth", "_key", "-key", "apikey",
    "accesskey", "privatekey", "accountkey", "sharedkey", "signingkey",
    "encryptionkey", "masterkey", "string", "conn_str", "conn-str", "connstr",
    "signature", "sig=", "x-amz-", "x-goog-", "cookie", "session", "hf_",
    "sk-proj-", "sk-svcacct-", "sk-admin-", "sk-ant-", "t3blbkfj", "k_live_",
    "k_test_", "aiza", "ya29.", "npm_", "pypi-", "sg.", "_v1_", "dapi", "shp",
    "atatt3",
)  # fmt: skip


def _trie(words: Sequence[str]) -> str:
    """A regular expression matching any of ``words`` (no empty one), as a
    trie: ``auth|authorization|bearer`` becomes ``auth(?:orization)?|bearer``."""
    if words == [""]:
        return ""
    first: dict[str, list[str]] = {}
    for word in words:
        if word:
            first.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(c) + _trie(rest) for c, rest in sorted(first.items())]
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in words else body


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
        # literal fast path (17 us a line against 1.6 us, measured). One
        # expression shaped as a trie of the words: a scan of the batch that
        # tries only the words that start with the character at hand (a find
        # per word scans the batch once per word). Not RE2, though faster:
        # its binding (pybind11) is called from the recorder's daemon threads,
        # and a daemon thread inside it when the interpreter exits aborts the
        # process (pybind11 swallows the forced unwind of pthread_exit).
        words = sorted({t.lower() for t in triggers or ()})
        self._triggers = re.compile(_trie(words)) if triggers is not None else None

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

    def _secret_subtree(self, key: str) -> bool:
        # Storage options are credentials whatever their keys are called.
        return self.secret_key(key) or NOT_RECORDED.search(key) is not None

    def data(self, value: Any, *, secret: bool = False) -> Any:
        """A JSON-like value with its secrets redacted: every string by the
        text patterns, and the values of keys that name a secret (keys kept;
        booleans and None kept too: no secret is a flag)."""
        if not self.enabled:
            return value
        if isinstance(value, dict):
            return {
                k: self.data(v, secret=secret or self._secret_subtree(str(k)))
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
        return {
            bisect.bisect_right(ends, match.start())
            for match in self._triggers.finditer(joined)
        }

    def records(self, records: Iterable[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """Pulled ``(number, wire record)`` pairs with their text redacted: log
        messages, task keys and prefixes, exceptions and tracebacks, event
        data. Metrics are numbers, and are passed as they are. The texts of a
        batch are searched together (``suspects``: most hold nothing), and a
        record is rebuilt only when something in it changed."""
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
