#!/usr/bin/env bash
# The accelerator check, one prepared run (the H200 machine: jax 0.11 with CUDA,
# torch 2.11, no network, so nothing is installed: PYTHONPATH=. instead).
#
#   OUT=gpu_out bash benchmarks/gpu_check.sh
#
# Oracle tests and `python -m jaxpool.verify --device gpu`, then both benchmark
# scripts on large shapes against torch CUDA. Logs and JSON go under $OUT.
set -uo pipefail
out="${OUT:-gpu_out}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax, torch; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__)"
} 2>&1 | tee "$out/machine.txt"

echo "== tests on the GPU"
timeout 170 python3 -m pytest -q -x -p no:cacheprovider \
  tests/test_max_pool3d.py tests/test_family.py tests/test_unpool.py \
  tests/test_adaptive.py 2>&1 | tail -n 15 | tee "$out/tests.txt"

echo "== verify"
timeout 100 python3 -m jaxpool.verify --quick --device gpu --json "$out/verify.json" \
  2>&1 | tail -n 4 | tee "$out/verify.txt"

echo "== benchmarks"
timeout 150 python3 benchmarks/bench_max_pool3d.py --large --torch-device cuda \
  --reps 20 --json "$out/gpu_max_pool3d.json" 2>&1 | tee "$out/gpu_max_pool3d.txt"
timeout 100 python3 benchmarks/bench_adaptive_max_pool2d.py --large \
  --torch-device cuda --reps 20 --json "$out/gpu_adaptive.json" 2>&1 \
  | tee "$out/gpu_adaptive.txt"
