"""Secrets planted in a run (a task's log lines, the client's config, a
notebook's code) and where they are found, in a module that imports next to
nothing: a worker imports the module of a task's function to run it."""

from __future__ import annotations

import logging

from .corpus import NEGATIVES, POSITIVES

SECRETS = {
    "coiled.token": "tok-COILED-5f1e9a7c",
    "gateway.auth.kwargs.password": "gw-PASS-8d2b41",
    "DB_PASSWORD": "db-PASS-3c4d77",
    "password=": "pw-LOG-91ab0c",
    "Authorization": "bearerTOKEN0a1b2c3d",
    "aws": "AKIAZ7QW2ERTY6UIOP3A",
    "github": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
}
CLEAN = "a clean line: naïve ☃\twith tab, 100 % done"
#: The archive's storage options as the docs tell users to set them: never
#: recorded, whatever their keys are called.
ARCHIVE_OPTIONS = {
    "account_name": "teamruns",
    "account_key": "azACCOUNTkey-6f0e1d2c==",
    "connection_string": "opaque-CONN-4b3a29",
}


def leak() -> str:
    """A task that logs four of the secrets, then a clean line."""
    log = logging.getLogger("user.etl")
    log.warning(
        "connecting with password=%s, Authorization: Bearer %s, key %s, token %s",
        SECRETS["password="], SECRETS["Authorization"], SECRETS["aws"],
        SECRETS["github"],
    )  # fmt: skip
    log.warning(CLEAN)
    # Every shape of the corpus, each line logged whole (with its new lines).
    corpus = logging.getLogger("user.corpus")
    for line, _ in POSITIVES:
        corpus.warning(line)
    for line in NEGATIVES:
        corpus.warning(line)
    return "done"


def found_in(data: bytes | str) -> list[str]:
    """Which of the secrets ``data`` holds: the planted ones by name, the
    archive's options and the corpus's by the secret itself."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    planted = [name for name, secret in SECRETS.items() if secret in text]
    options = [f"archive-options.{k}" for k, v in ARCHIVE_OPTIONS.items()
               if k != "account_name" and v in text]  # fmt: skip
    return planted + options + [s for _, s in POSITIVES if s in text]
