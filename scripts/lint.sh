#!/usr/bin/env bash
# The linters and type checkers: ruff, mypy, tsc, eslint, prettier. Run by
# .ci/run before the tests and by pre-commit (.pre-commit-config.yaml); kept out
# of pytest so that the test command spends its time on behaviour.
# Every check runs; the script fails if any one did, naming it.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
failed=()
check() {
  local name=$1
  shift
  if ! out=$("$@" 2>&1); then
    printf '%s found problems:\n%s\n' "$name" "$out"
    failed+=("$name")
  fi
}
# No cache: its key is each file's text, so a new folder that changes how
# imports sort passed here and failed in CI's fresh clone.
check "ruff check" "$BIN/ruff" check --no-cache .
check "ruff format" "$BIN/ruff" format --no-cache --check .
check "mypy" "$BIN/mypy"
# A second run: tests/ and ui-tests/ both hold a conftest.py, which one run cannot take.
check "mypy ui-tests" "$BIN/mypy" ui-tests
check "tsc" npx --no-install tsc --noEmit
# The TypeScript units too (jest only transpiles them, for speed).
check "tsc tests" npx --no-install tsc -p tsconfig.test.json
check "eslint" npx --no-install eslint src
check "prettier" npx --no-install prettier --check "src/**/*.ts" "style/**/*.css"
if ((${#failed[@]})); then
  echo "lint: failed: ${failed[*]}"
  exit 1
fi
echo "lint: ruff, mypy, tsc, eslint and prettier are clean"
