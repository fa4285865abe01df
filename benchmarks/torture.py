"""The store under torture, longer than the suite's run of it (tests/torture.py).

    .venv/bin/python benchmarks/torture.py --tries 5 --recorders 3 --blocks 8

Each try starts on a fresh store: ``--recorders`` processes recording
``--blocks`` blocks each (a LocalCluster a block), a recorder killed mid-block,
and short-lived readers of every kind (API, CLI, the server's read-only view,
export, prune), one in five killed mid-read. A try passes when every block ran,
every ended run is whole, the killed run reads interrupted, no open failed and
``integrity_check`` is ok. Prints a line a try and the count that passed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import torture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--recorders", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=300)
    args = parser.parse_args()
    passed = 0
    for seed in range(args.tries):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "observe.sqlite"
            outcome = torture.run(
                path, args.recorders, args.blocks, args.seconds, seed=seed
            )
            wrong = torture.check(path, outcome, args.blocks)
        readers = outcome["readers"]
        killed = sum(r["killed"] for r in readers)
        print(
            f"try {seed}: {outcome['seconds']:.0f} s, {len(readers)} readers "
            f"({killed} killed): {wrong or 'ok'}",
            flush=True,
        )
        passed += not wrong
    print(f"{passed} of {args.tries} tries passed")


if __name__ == "__main__":
    main()
