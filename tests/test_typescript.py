"""The panel's TypeScript units (the log buffer, the stream client over a fake
socket), tested with jest as JupyterLab's own packages are: run here so that
the one test command runs them too. The views are tested in a real JupyterLab
(``ui-tests/``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_panels_typescript_units_pass() -> None:
    done = subprocess.run(
        ["npx", "--no-install", "jest", "--ci"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"jest failed:\n{done.stdout}{done.stderr}"
    # Every suite ran and passed (jest counts them on stderr).
    suites = re.search(r"Test Suites: (\d+) passed, (\d+) total", done.stderr)
    assert suites and suites[1] == suites[2] and int(suites[1]) >= 2, done.stderr
