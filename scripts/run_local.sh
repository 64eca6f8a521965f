#!/usr/bin/env bash
# `make run`: the whole system on this machine — router, a prefill worker and a decode worker
# as separate processes on loopback (KV over UCX/tcp), serving the bundled tiny model.
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/tiny-dsv4-dspark}
if [ ! -f "$model/config.json" ]; then
  # No trained model bundled yet: serve the golden DeepSeek-V4-Flash checkpoint (random
  # weights) with a byte-level tokenizer, prepared by CMake for the integration tests.
  echo "run_local: $model has no config.json; serving the golden tiny checkpoint instead" >&2
  model=build/tests/integration/golden-model
fi
exec build/bin/pdspark launch --model "$model" --prefill 1 --decode 1 \
  --http-port "${HTTP_PORT:-8000}" --grpc-port "${GRPC_PORT:-50051}"
