"""Benchmark sessions of several variants, alternating, so that they are
measured side by side in one run: each session is a fresh process of the
benchmark's own script, with a checkout of another commit first on
``PYTHONPATH`` (``--variant NAME=PATH``), that prints its measurements as JSON
on its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def parse(specs: Sequence[str], default: str = ".") -> dict[str, str]:
    """``NAME=PATH`` options as a mapping; this checkout alone if none."""
    return dict(spec.split("=", 1) for spec in specs) or {"this": default}


def sessions(
    script: str, variants: dict[str, str], rounds: int, args: Sequence[str]
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Run ``script args`` once per variant per round, the variants' order
    rotated from round to round; yield (round, variant, its JSON)."""
    for n in range(rounds):
        order = list(variants.items())
        for name, path in order[n % len(order) :] + order[: n % len(order)]:
            env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
            out = subprocess.run(
                [sys.executable, script, *args],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            yield n, name, json.loads(out.stdout.strip().splitlines()[-1])
