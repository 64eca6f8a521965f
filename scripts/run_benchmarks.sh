#!/usr/bin/env bash
# `make bench`: every benchmark binary in build/bin whose name ends in _bench.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in build/bin/*_bench; do
  [ -x "$b" ] || continue
  echo "== $b"
  "$b"
done
