#!/usr/bin/env bash
# The whole suite, in one pytest-xdist session of three test processes on
# 2 cores (tests/turns.py says who runs when). The tests whose verdicts depend
# on the machine's load (the "timing" marker: flags judged from stalls and
# host load, regressions from timings) run first, two at a time, none beside
# one marked "alone", and no other test starts until they are all done. The
# rest then run three at a time, each module's tests in one process (--dist
# loadscope: its JupyterLab, browser and clusters start once), the longest
# modules first (tests/seconds.json). Three, not two, on 2 cores: the tests
# wait on processes, browsers and naps, and a third fills those waits (5:38
# against 6:25 back to back, docs/suite.md).
# Bytecode is written even where the machine says not to
# (PYTHONDONTWRITEBYTECODE): the suite's ~250 processes (workers, kernels,
# servers, CLI runs) would each compile dask_observe and the tests from
# source. Arguments go to pytest; SELECT holds a marker expression
# (scripts/min-deps.sh: SELECT="not browser and not remote and not
# packaging"), PYTHON the interpreter (.venv's by default), TEST_WORKERS the
# number of test processes, TEST_SECONDS=write rewrites tests/seconds.json
# from this run.
set -uo pipefail
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
select=${SELECT:-}
workers=${TEST_WORKERS:-3}
start=$(date +%s)
"$python" -m pytest -n "$workers" --dist loadscope ${select:+-m "$select"} "$@"
status=$?
echo "test: $(( $(date +%s) - start )) s in all"
exit "$status"
