#!/usr/bin/env bash
# The one prepared run for a CUDA machine: the CUDA tests, a kernel profile of the decode step,
# then the full benchmark, in under 8 minutes on one large GPU. It needs only a python3 that has
# torch with CUDA (plus transformers, pytest and hypothesis for the tests); kvtutor runs from src/
# without being installed.
#
#   OUT=/some/dir bash tools/gpu_check.sh
#
# writes $OUT/cuda-tests.log, $OUT/kernels-*.txt + profile.json + profile.log, $OUT/bench.log and
# $OUT/bench-$DEVICE.json (GPU name and date inside; written after every section, so a run cut
# short keeps what it measured). Commit the JSON as src/kvtutor/data/runs/bench-cuda.json (and the
# logs beside it in a dated folder) and re-run `make notebooks`. DEVICE=cpu SIZE=tiny rehearses
# the same steps on a machine without a GPU (tests/test_gpu_check.py runs that rehearsal, in under
# a minute: tiny shapes on one thread); STEPS=tests (or profile, bench) runs only the steps named.
#
# The CUDA tests are found, not named: every tests/test_*.py that asks torch for CUDA, and in them
# every test whose id says "cuda" (the cuda_only tests, the dtype matrix's CUDA rows). The step
# fails when no file or no test is found, when pytest fails, and on a GPU when any test is skipped
# for want of one: a renamed file or test can never make it run nothing again.
set -u -o pipefail
shopt -s extglob
OUT=${OUT:-.}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-full}
PY=${PYTHON:-python3}
STEPS=${STEPS:-tests profile bench}
for step in $STEPS; do
    [[ $step == @(tests|profile|bench) ]] || {
        echo "gpu_check: STEPS: expected words from 'tests profile bench', got '$step'" >&2
        exit 2
    }
done
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# tiny shapes run fastest on one thread, and a second spinning thread crawls on a busy machine
[[ $SIZE == tiny ]] && export OMP_NUM_THREADS=1
"$PY" - <<PYEOF || exit 2
import torch
print("torch", torch.__version__, "| cuda available:", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
assert "$DEVICE" == "cpu" or torch.cuda.is_available(), "DEVICE=cuda but torch sees no GPU"
PYEOF
status=0
fail() { echo "gpu_check: $*" | tee -a "$OUT/cuda-tests.log" >&2; status=1; }

# every CUDA test: the dtype/device matrix runs each public model method on CUDA too
if [[ $STEPS == *tests* ]]; then
    : > "$OUT/cuda-tests.log"
    mapfile -t test_files < <(grep -l 'torch\.cuda\.is_available()' tests/test_*.py 2>/dev/null)
    if (( ${#test_files[@]} == 0 )); then
        fail "no test file under tests/ asks for CUDA (torch.cuda.is_available())"
    else
        echo "CUDA tests from: ${test_files[*]}" | tee -a "$OUT/cuda-tests.log"
        timeout 300 "$PY" -m pytest -q -rs -p no:cacheprovider "${test_files[@]}" -k cuda \
            2>&1 | tee -a "$OUT/cuda-tests.log"
        rc=$?
        (( rc == 5 )) && fail "pytest selected no CUDA test (-k cuda) in ${test_files[*]}"
        (( rc != 0 && rc != 5 )) && fail "the CUDA tests failed (pytest exit $rc)"
        if [[ $DEVICE != cpu ]] && grep -qE '^SKIPPED .*needs a CUDA device' "$OUT/cuda-tests.log"; then
            fail "on a GPU, CUDA tests were skipped for want of one (SKIPPED lines above)"
        fi
    fi
fi
if [[ $STEPS == *profile* ]]; then
    timeout 60 env OUT="$OUT" DEVICE="$DEVICE" SIZE="$SIZE" "$PY" tools/gpu_profile.py \
        2>&1 | tee "$OUT/profile.log" || status=1
fi
if [[ $STEPS == *bench* ]]; then
    # every section, the CUDA-only engine section too on a CPU (a rehearsal)
    timeout 300 "$PY" -m kvtutor bench --device "$DEVICE" --size "$SIZE" --out "$OUT/bench-$DEVICE.json" \
        --sections all 2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
