#!/usr/bin/env bash
# The suite (but the browser, remote-cluster and packaging groups) against the
# lowest versions pyproject.toml claims: every `name>=X` of the package's
# dependencies pinned to X, the test tools as they come. Run by .ci/run after
# the main suite; a bound that does not hold fails here, not in a user's
# environment. Its environment is .cache/min-deps (git ignores .cache/).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/min-deps
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" - > "$venv/constraints.txt" <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for requirement in project["dependencies"]:
    found = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement)
    if found:
        print(f"{found[1]}=={found[3]}")
PY
echo "min-deps: $(tr '\n' ' ' < "$venv/constraints.txt")"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The package itself from this checkout (its panel is built already: setup.sh).
"$venv/bin/python" -m pip install --quiet -c "$venv/constraints.txt" --editable ".[test]"
"$venv/bin/python" -m pip check
# As an activated environment: tests start `dask scheduler` processes by name.
export PATH="$PWD/$venv/bin:$PATH"
PYTHON="$venv/bin/python" SELECT="not browser and not remote and not packaging" \
  bash scripts/test.sh -p no:cacheprovider -q tests
