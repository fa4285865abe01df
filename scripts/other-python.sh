#!/usr/bin/env bash
# The suite but its slow groups (browser, remote, packaging) on another Python
# than setup.sh's: `bash scripts/other-python.sh 3.12` (pyenv's newest 3.12.x
# here, or the interpreter PYTHON names). Its environment is .cache/py<version>
# (git ignores .cache/). CI runs it for 3.12 and 3.13; docs/architecture.md says
# why it was kept out until 2026-11-26 (aborts at exit, explained).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?which Python, e.g. 3.12 or 3.13}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  python=$(ls -d "$HOME"/.pyenv/versions/"$version".*/bin/python 2>/dev/null | sort -V | tail -1 || true)
fi
if [ -z "$python" ] || [ ! -x "$python" ]; then
  echo "other-python: no Python $version here (install it with pyenv, or set PYTHON)" >&2
  exit 1
fi
venv=.cache/py$version
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
echo "other-python: $("$venv/bin/python" -V)"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The package from this checkout (its panel is built already: setup.sh).
"$venv/bin/python" -m pip install --quiet --editable ".[test]"
"$venv/bin/python" -m pip check
# As an activated environment: tests start `dask scheduler` processes by name.
export PATH="$PWD/$venv/bin:$PATH"
PYTHON="$venv/bin/python" SELECT="not browser and not remote and not packaging" \
  bash scripts/test.sh -p no:cacheprovider -q tests
