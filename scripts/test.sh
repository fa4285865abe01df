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
# from this run, TEST_LIMIT_S the session's limit.
#
# A session past its limit (25 minutes; the suite takes ~9 here) is stopped
# after printing every process with its state and the stack of each test
# process: a hang that pytest-timeout cannot reach (a process stopped, not
# running: a worker's py-spy dump once left one so, 2026-12-01) then fails
# CI within minutes, saying where, instead of running into its limit silent.
set -uo pipefail
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
select=${SELECT:-}
workers=${TEST_WORKERS:-3}
limit=${TEST_LIMIT_S:-1500}
start=$(date +%s)
"$python" -m pytest -n "$workers" --dist loadscope ${select:+-m "$select"} "$@" &
tests=$!
# Its own output elsewhere: a sleep left behind must not hold CI's pipe open.
sleep "$limit" >/dev/null 2>&1 &
timer=$!
wait -n -p ended "$tests" "$timer"
if [ "$ended" = "$timer" ]; then
  {
    echo "test: still running after $limit s: every process now (STAT T: stopped)"
    ps -eo pid,ppid,stat,etime,args --forest | cut -c1-200
    spy="$(dirname "$python")/py-spy"
    for pid in $(pgrep -P "$tests"); do
      echo "---- test process $pid"
      [ -x "$spy" ] && timeout 30 "$spy" dump --nonblocking --pid "$pid"
    done
  } >&2
  kill -INT "$tests"
  sleep 60 >/dev/null 2>&1 &
  wait -n "$tests" $!
  kill -KILL "$tests" 2>/dev/null
  pkill -KILL -P "$tests" 2>/dev/null
  wait "$tests"
  status=124
else
  wait "$tests"
  status=$?
  kill "$timer" 2>/dev/null
fi
echo "test: $(( $(date +%s) - start )) s in all"
exit "$status"
