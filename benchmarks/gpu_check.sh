#!/usr/bin/env bash
# The GPU check: one prepared run answers everything, within 9 minutes (each
# step has its own time limit, together 8.75 minutes, so a slow step costs
# only itself; on 2026-12-04 the steps took 156, 60, 42, 38, 61 and 65 s) on
# the lent H200 (jax 0.11 with CUDA, torch 2.11, no network: nothing is
# installed, PYTHONPATH=. instead).
#
#   OUT=gpu_out bash benchmarks/gpu_check.sh
#
# Writes 8 files under $OUT (the device tool returns at most 8):
#   summary.txt          the machine, then the tests on the GPU (full tier):
#                        the Pallas kernels compiled (tests/test_pallas.py, and
#                        the oracle grids' pallas form) and the oracle grids
#                        in the platform's own forms, XLA's accelerator forms
#                        natively there (tests/test_oracle.py, its "cpu" form:
#                        the seam's own choice, whatever the platform)
#   gpu_max_pool3d.txt   xla vs pallas vs torch CUDA on the large shapes, with %
#   gpu_max_pool3d.json  of a measured device copy's bandwidth (and the JSON);
#                        the train step with auto, the scatter and the gather,
#                        which settles auto's GPU rule on that jaxlib
#   gpu_adaptive.txt     the same for the adaptive pools
#   gpu_adaptive.json
#   reproducibility.txt  each backward run 20 times: distinct results
#   profile.txt          per-kernel time of each contender (jaxpool xla,
#                        jaxpool pallas, torch CUDA)
#   compiled.json        the compile-time facts of the benchmarked programs
#                        (benchmarks/compiled.py) on this GPU and on the
#                        compile-only H200 that CI checks: kernels, Triton
#                        registers and spills, PTX atomics and CAS loops, so
#                        that the measured figures confirm or refute each
#
# GPU_CHECK_DRY=1 runs every step on tiny shapes and the CPU (Pallas's
# interpreter, torch CPU): a check that the script itself works, in CI.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_out}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
summary="$out/summary.txt"
: >"$summary"

if [ "${GPU_CHECK_DRY:-0}" = 1 ]; then
  # Pallas's interpreter profiles slowly on a CPU shared with other tests.
  size=(--quick) device=cpu platform=cpu runs=3 calls=2 profile_limit=90
  tests=(--full tests/test_pallas.py -k "bad_implementation or none_is_xla")
  compiled=(--quick --targets h200)
else
  size=(--large) device=cuda platform=cuda runs=20 calls=10 profile_limit=35
  tests=(--full tests/test_pallas.py tests/test_oracle.py
    -k "not sweep and not default and not tpu and not float64")
  compiled=(--targets gpu,h200 --programs "^(8x32x64³ k2 s2|8x32x64³ k3 s2 p1|2x32x96³ k3 s1 p1) ")
fi

step() { echo "== $1 ($(date +%T))" | tee -a "$summary"; }

step "machine"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -3
  python3 -c "import jax, torch; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__)"
} 2>&1 | tee -a "$summary"

step "tests on the device"
JAX_PLATFORMS="$platform" timeout 170 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" \
  --maxfail=20 "${tests[@]}" 2>&1 | tail -n 30 | tee -a "$summary"

step "benchmarks: max_pool3d"
timeout 90 python3 benchmarks/bench_max_pool3d.py "${size[@]}" \
  --torch-device "$device" --implementations xla,pallas --reps 20 \
  --json "$out/gpu_max_pool3d.json" >"$out/gpu_max_pool3d.txt" 2>&1
tail -n 2 "$out/gpu_max_pool3d.txt" | tee -a "$summary"

step "benchmarks: adaptive_max_pool2d"
timeout 60 python3 benchmarks/bench_adaptive_max_pool2d.py "${size[@]}" \
  --torch-device "$device" --implementations xla,pallas --reps 20 \
  --json "$out/gpu_adaptive.json" >"$out/gpu_adaptive.txt" 2>&1
tail -n 2 "$out/gpu_adaptive.txt" | tee -a "$summary"

step "reproducibility of every backward"
timeout 60 python3 benchmarks/reproducibility.py "${size[@]}" \
  --torch-device "$device" --runs "$runs" >"$out/reproducibility.txt" 2>&1
tail -n 2 "$out/reproducibility.txt" | tee -a "$summary"

step "per-kernel profiles"
for implementation in pallas xla; do
  torch=()
  [ "$implementation" = pallas ] && torch=(--torch "$device")
  timeout "$profile_limit" python3 benchmarks/profile_ops.py "${size[@]}" --calls "$calls" \
    --implementation "$implementation" "${torch[@]}" >>"$out/profile.txt" 2>&1
done
tail -n 2 "$out/profile.txt" | tee -a "$summary"
step "compile-time facts beside the figures"
JAX_PLATFORMS="$platform" timeout 75 python3 benchmarks/compiled.py "${compiled[@]}" \
  --json "$out/compiled.json" 2>&1 | grep -E "^(h200|gpu) " | tail -n 40 | tee -a "$summary"
step "done"
