#!/usr/bin/env bash
# `make run`: serves the bundled tiny model on this machine.
# Until the router and workers land this runs a single-process generation with the real engine.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/tiny-dsv4-dspark}
prompt=${2:-"ROMEO:"}
bin=build/bin/pdspark
if [ -f "$model/tokenizer.json" ]; then
  exec "$bin" generate --model "$model" --prompt "$prompt" --max-tokens 64
fi
# No trained model bundled yet: run the golden DeepSeek-V4-Flash checkpoint on token ids.
echo "run_local: $model has no tokenizer.json; generating from the golden tiny checkpoint" >&2
exec "$bin" generate --model tests/data/golden/dsv4-tiny-a --prompt-ids 0,17,42,99,7 --max-tokens 32
