#!/bin/sh
# ctest's entry: `npm ci` when node_modules is missing or stale, then the client test.
# Usage: run.sh HYDRAGEN_BINARY MODEL_DIR
set -eu
cd "$(dirname "$0")"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
exec node test.mjs "$@"
