"""Secrets planted in a run (a task's log lines, the client's config, a
notebook's code) and where they are found, in a module that imports next to
nothing: a worker imports the module of a task's function to run it."""

from __future__ import annotations

import logging

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


def leak() -> str:
    """A task that logs four of the secrets, then a clean line."""
    log = logging.getLogger("user.etl")
    log.warning(
        "connecting with password=%s, Authorization: Bearer %s, key %s, token %s",
        SECRETS["password="], SECRETS["Authorization"], SECRETS["aws"],
        SECRETS["github"],
    )  # fmt: skip
    log.warning(CLEAN)
    return "done"


def found_in(data: bytes | str) -> list[str]:
    """Which of the secrets ``data`` holds."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [name for name, secret in SECRETS.items() if secret in text]
