#!/bin/bash
# gpu_on_device.sh -- on an offline GPU machine, after the TensorFlow payload's parts arrived
# (../shared/gpu-payload: `recv.sh K N` for K = 1..N, back to back): waits for the payload's
# extraction, installs the wheels carried in .whl/ (what the trainer's modules import beyond
# the payload: google-crc32c, nvidia-ml-py), then runs benchmarks/gpu.py: the check (with
# TensorFlow's library-loading log, to show that no "Cannot dlopen" stops the GPU) and the
# cases, within BUDGET seconds; further arguments go to gpu.py (--cases, --case-timeout, ...).
# Everything it writes goes to $OUT (default ./gpu-out): gpu.json after every case, each
# part's log, the GPU's name and driver.
#
# Usage, from the repository root: bash benchmarks/gpu_on_device.sh DATA_DIR [BUDGET [ARGS...]]
set -uo pipefail
DATA=${1:?the dataset stage output (benchmarks/gpu.py prepare)}; BUDGET=${2:-420}
shift; [ $# -gt 0 ] && shift
G=${GP_ROOT:-/tmp/gp}; OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
for _ in $(seq 1 600); do
  [ -f "$G/extract.done" ] || [ -f "$G/extract.failed" ] && break; sleep 0.2
done
tail -3 "$G/extract.log"; [ -f "$G/extract.done" ] || { echo "payload not extracted"; exit 4; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 5
# shellcheck source=/dev/null
source "$G/bin/env.sh"
export PYTHONPATH=$PWD:/tmp/site:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" benchmarks/gpu.py all --data "$DATA" --budget "$BUDGET" --output "$OUT/gpu.json" \
  --logs "$OUT/logs" "$@"; code=$?
grep -E "Successfully opened|Could not load|Cannot dlopen" "$OUT/logs/check.log" | cut -c1-200
exit $code
