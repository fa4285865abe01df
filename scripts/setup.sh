#!/usr/bin/env bash
# Set up a development environment in .venv from a fresh clone.
#
# Installs dask-observe in editable mode with its test and dev tools (pip builds the
# TypeScript panel with npm), and Chromium for the browser tests when it is missing
# and this machine has apt-get. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "setup: $1 is required: $2" >&2; exit 1; }
}
need python3 "install Python 3.11 or newer"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup: python3 is $(python3 -V 2>&1 | cut -d' ' -f2); dask-observe needs 3.11 or newer" >&2
  exit 1
}
need npm "install Node.js 20 or newer with npm; it builds the JupyterLab panel"

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# The npm packages as package-lock.json pins them (the panel's build, its
# linters and unit tests): the editable install below builds the panel only
# where no build is there yet, and would not see new ones after a pull.
echo "setup: npm packages"
npm install --no-audit --no-fund --loglevel=error
echo "setup: installing dask-observe (editable) with its test and dev tools"
# The link a previous run made (below) goes first: the install would write its
# install.json through it into labextension/, and the wheel would then hold it
# twice (a second run of this script broke the packaging test so).
extensions=$(.venv/bin/python -c 'import sys; print(sys.prefix)')/share/jupyter/labextensions
rm -rf "$extensions/dask-observe" labextension/install.json
.venv/bin/python -m pip install --quiet --editable ".[lab,test,dev,docs]"

# The editable install copied the bundle; a link makes `npm run build` take effect
# on the next page load instead.
rm -rf "$extensions/dask-observe"
ln -s "$PWD/labextension" "$extensions/dask-observe"

# The tests record clusters started from an environment without dask-observe
# (dask and distributed only, at the same versions), as users' clusters are.
echo "setup: the cluster environment for the remote-cluster tests"
.venv/bin/python -m tests.remote

# Debian's packages the tests use: Chromium (the browser tests) and
# libfaketime (a worker whose clock runs ahead, tests/remote.py).
wanted=()
chromium="${DASK_OBSERVE_CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || wanted+=(chromium)
compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null || wanted+=(faketime)
if [ "${#wanted[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's ${wanted[*]} for the tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${wanted[@]}" >/dev/null
  else
    echo "setup: the tests need Debian's ${wanted[*]} (apt-get install ${wanted[*]};" >&2
    echo "       DASK_OBSERVE_CHROMIUM names another Chromium)" >&2
  fi
fi
echo "setup: done"
