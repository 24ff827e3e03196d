#!/usr/bin/env bash
# The one prepared run for a CUDA machine: the CUDA tests, a kernel profile of the decode step,
# then the full benchmark, in under 8 minutes on one large GPU. It needs only a python3 that has
# torch with CUDA (plus transformers, pytest and hypothesis for the tests); kvtutor runs from src/
# without being installed.
#
#   OUT=/some/dir bash tools/gpu_check.sh
#
# writes $OUT/cuda-tests.log, $OUT/kernels-*.txt + profile.json, $OUT/bench.log and
# $OUT/bench-cuda.json (GPU name and date inside; written after every section, so a run cut short
# keeps what it measured). Commit the JSON as src/kvtutor/data/runs/bench-cuda.json (and the logs
# beside it in a dated folder) and re-run `make notebooks`. DEVICE=cpu SIZE=tiny rehearses the same
# steps on a machine without a GPU.
set -u -o pipefail
OUT=${OUT:-.}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-full}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" - <<PYEOF || exit 2
import torch
print("torch", torch.__version__, "| cuda available:", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
assert "$DEVICE" == "cpu" or torch.cuda.is_available(), "DEVICE=cuda but torch sees no GPU"
PYEOF
status=0
# every CUDA test: the dtype/device matrix runs each public TorchGPT2Model method on CUDA too
timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_torch_dtypes.py tests/test_torch_gpt2.py \
    tests/test_timing.py -k "cuda or dtypes" 2>&1 | tee "$OUT/cuda-tests.log" || status=1
timeout 60 env OUT="$OUT" DEVICE="$DEVICE" SIZE="$SIZE" "$PY" tools/gpu_profile.py \
    2>&1 | tee "$OUT/profile.log" || status=1
# on a CPU (a rehearsal) the engine section, CUDA's by default, is asked for by name
sections=()
[[ $DEVICE == cpu ]] && sections=(--sections rooflines,bandwidth,generate,prefill_goal,concat,recompute,engine)
timeout 300 "$PY" -m kvtutor bench --device "$DEVICE" --size "$SIZE" --out "$OUT/bench-$DEVICE.json" "${sections[@]}" \
    2>&1 | tee "$OUT/bench.log" || status=1
exit $status
