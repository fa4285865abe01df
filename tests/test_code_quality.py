"""The linters and type checkers, so that the one test command runs them too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
NPX = ["npx", "--no-install"]

CHECKS: dict[str, list[str | Path]] = {
    "ruff check": [BIN / "ruff", "check", "."],
    "ruff format": [BIN / "ruff", "format", "--check", "."],
    "mypy": [BIN / "mypy"],
    # A second run: both folders hold a conftest.py, which one run cannot take.
    "mypy ui-tests": [BIN / "mypy", "ui-tests"],
    "tsc": [*NPX, "tsc", "--noEmit"],
    "eslint": [*NPX, "eslint", "src"],
    "prettier": [*NPX, "prettier", "--check", "src/**/*.ts", "style/**/*.css"],
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_code_is_clean(name: str) -> None:
    done = subprocess.run(
        [str(part) for part in CHECKS[name]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name} found problems:\n{done.stdout}{done.stderr}"
