#!/bin/bash
# Retrain the tiny DeepSeek-V4-Flash-DSpark model from scratch (fixed seeds) and export it to
# models/tiny-dsv4-dspark/.  CPU only; Debian's /usr/bin/python3 with python3-torch + numpy.
#
#   TARGET_MINUTES / DRAFTER_MINUTES  wall-time bounds (default 45 / 18).  The LR schedules and
#       the QAT switch follow steps or wall time, whichever is further, so on a busy machine fewer
#       steps run.  Set both to 0 for a step-exact run (TARGET_STEPS / DRAFTER_STEPS steps, same
#       result on every run of the same torch build).
#   THREADS  torch threads (default 1: the machine is shared with C++ builds).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-1}
TARGET_MINUTES=${TARGET_MINUTES:-45}
DRAFTER_MINUTES=${DRAFTER_MINUTES:-18}
TARGET_STEPS=${TARGET_STEPS:-650}
DRAFTER_STEPS=${DRAFTER_STEPS:-800}
MODEL=../../models/tiny-dsv4-dspark
mkdir -p out "$MODEL"

if [ ! -f data/tinyshakespeare.txt ]; then
  $PY prepare_data.py   # needs the shared reference folder; the repository ships data/
fi
$PY bpe_tokenizer.py train --vocab-size 4096 --out "$MODEL/tokenizer.json"
$PY train_target.py --steps "$TARGET_STEPS" --max-minutes "$TARGET_MINUTES" --warmup 30 \
  --eval-every 100 --log-every 10 --qat-from 0.6 --seed 0 --threads "$THREADS" 2>&1 | tee out/target.log
$PY train_drafter.py --steps "$DRAFTER_STEPS" --max-minutes "$DRAFTER_MINUTES" --seed 0 \
  --threads "$THREADS" 2>&1 | tee out/drafter.log
$PY export.py --out "$MODEL"
$PY fit_confidence_temperatures.py --model "$MODEL" --threads "$THREADS" | tee out/sts.log
$PY sample.py --model "$MODEL" --json out/sample.json --threads "$THREADS" | tee out/sample.log
$PY drafter_reference.py --model "$MODEL" --new 64   # reference drafts for the C++ engine
$PY test_export.py
