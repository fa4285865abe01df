#!/usr/bin/env bash
# The whole suite, in two parts. The tests whose verdicts depend on the
# machine's load (the "timing" marker: flags judged from stalls and host load,
# regressions from timings) run first, two at a time, none beside one marked
# "alone" (tests/turns.py; 1:25-1:28 where one at a time took 1:46-1:51, and
# 1:33 with whole modules per process); the rest run two at a time
# (pytest-xdist), as on 2 cores they leave one mostly idle (waiting on
# servers, browsers, processes; three at a time was faster, and once judged a
# run of a team's history slower than its load-free truth). A module's tests
# stay in one process (--dist loadscope): its JupyterLab, browser and clusters
# start once, not once per process that drew one of its tests. Bytecode is
# written even where the machine says not to (PYTHONDONTWRITEBYTECODE): the
# suite's ~250 processes (workers, kernels, servers, CLI runs) would each
# compile dask_observe and the tests from source. Arguments go to both parts;
# SELECT holds a marker expression both parts keep to (scripts/min-deps.sh:
# SELECT="not browser and not remote and not packaging"), PYTHON the
# interpreter (.venv's by default), TEST_WORKERS the second part's processes.
set -uo pipefail
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
select=${SELECT:-}
workers=${TEST_WORKERS:-2}
both() { if [ -n "$select" ]; then echo "$1 and ($select)"; else echo "$1"; fi; }
start=$(date +%s)
"$python" -m pytest -n 2 --dist load -m "$(both timing)" "$@"
timing=$?
"$python" -m pytest -n "$workers" --dist loadscope -m "$(both 'not timing')" "$@"
beside=$?
echo "test: $(( $(date +%s) - start )) s in all (timing: exit $timing, the rest: exit $beside)"
[ "$timing" -eq 0 ] && [ "$beside" -eq 0 ]
