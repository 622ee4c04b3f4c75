"""Benchmark max_pool3d_with_argmax against PyTorch CPU and lax.reduce_window.

    python benchmarks/bench_max_pool3d.py                # the tracked shapes
    python benchmarks/bench_max_pool3d.py --quick        # tiny shapes (smoke test)
    python benchmarks/bench_max_pool3d.py --json benchmarks/results/max_pool3d.json

One row per (shape, figure, contender): interleaved medians with min-max, the
ratio to the row's baseline (torch for forward/backward, JAX's reduce_window
autodiff for the train step grad(sum(w * pool(x)))), and effective GB/s against
a measured copy bandwidth (the roofline). torch runs with its default threads
and with one (XLA:CPU runs these fusions on one thread). Then the forward's
temporary memory; then a cold compile of a 7^3 kernel in a fresh process and
that kernel's forward temporaries on 2x32x32^3.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing
from _timing import bench_op

import jaxpool

# (N, C, D, H, W), kernel, stride, padding
SHAPES = [
    ((2, 32, 32, 32, 32), 2, 2, 0),
    ((2, 32, 32, 32, 32), 3, 2, 1),
    ((1, 16, 48, 48, 48), 3, 1, 1),
]
QUICK = [((1, 2, 8, 8, 8), 2, 2, 0), ((1, 2, 8, 8, 8), 3, 2, 1)]
LARGE = [  # --large, for accelerators: 256-288 MB inputs
    ((8, 32, 64, 64, 64), 2, 2, 0),
    ((8, 32, 64, 64, 64), 3, 2, 1),
    ((2, 32, 96, 96, 96), 3, 1, 1),
]

COMPILE_SNIPPET = """
import time, jax, jax.numpy as jnp, jaxpool
x = jax.ShapeDtypeStruct((1, 4, 24, 24, 24), jnp.float32)
f = jax.jit(lambda x: jaxpool.max_pool3d_with_argmax(x, 7, 1, 3))
t = time.perf_counter(); f.lower(x).compile(); print(time.perf_counter() - t)
"""


def compile_time() -> float:
    """Cold compile of a 7^3 kernel, stride 1, padding 3, in a fresh process."""
    run = subprocess.run(
        [sys.executable, "-c", COMPILE_SNIPPET],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(run.stdout.strip().splitlines()[-1])


def ops(case, torch):
    """One case's name and calls, as every script here makes them: jaxpool's
    forward ``(x, **kw)`` and backward ``(g, x, indices, **kw)``, torch's
    forward ``(xt)`` and backward ``(gt, xt, it)``."""
    shape, k, s, p = case
    return (
        f"{'x'.join(map(str, shape))} k{k} s{s} p{p}",
        lambda x, **kw: jaxpool.max_pool3d_with_argmax(x, k, s, p, **kw),
        lambda g, x, i, **kw: jaxpool.max_pool3d_with_argmax_backward(
            g, x, i, k, s, p, **kw
        ),
        lambda xt: torch.nn.functional.max_pool3d(xt, k, s, p, return_indices=True),
        lambda gt, xt, it: torch.ops.aten.max_pool3d_with_indices_backward(
            gt, xt, [k] * 3, [s] * 3, [p] * 3, [1] * 3, False, it
        ),
    )


def cases(shapes, dtype, reps, torch, bandwidth):
    rows = []
    for case in shapes:
        shape, k, s, p = case
        x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        pad = ((0, 0), (0, 0)) + ((p, p),) * 3
        name, pool, backward, torch_pool, torch_backward = ops(case, torch)
        rows += bench_op(
            name,
            x,
            pool,
            backward,
            torch_pool,
            torch_backward,
            lambda x, k=k, s=s, pad=pad: lax.reduce_window(
                x, -jnp.inf, lax.max, (1, 1, k, k, k), (1, 1, s, s, s), pad
            ),
            reps,
            torch,
            bandwidth,
        )
    return rows


def large_kernel_memory(shape=(2, 32, 32, 32, 32), k=7, s=1, p=3):
    """The forward's temporaries for a 7^3 kernel, stride 1, padding 3, against
    the input's bytes (no timing: the compiled program's memory analysis)."""
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    f = jax.jit(lambda x: jaxpool.max_pool3d_with_argmax(x, k, s, p))
    memory = f.lower(x).compile().memory_analysis()
    temp = float(getattr(memory, "temp_size_in_bytes", float("nan")))
    ratio = temp / (np.prod(shape) * 4)
    name = f"{'x'.join(map(str, shape))} k{k} s{s} p{p}"
    text = f"{name:<28} forward temp memory  jaxpool  {ratio:.2f}x input"
    return dict(
        shape=name,
        figure="forward temp memory",
        contender="jaxpool",
        temp_bytes=temp,
        ratio=ratio,
        text=text,
    )


def extra_rows():
    seconds = compile_time()
    text = f"compile time (cold, fresh process), kernel 7^3 s1 p3: {seconds:.2f} s"
    compile_row = dict(
        shape="1x4x24^3 k7 s1 p3",
        figure="compile time",
        contender="jaxpool",
        seconds=seconds,
        text=text,
    )
    return [compile_row, large_kernel_memory()]


def main(argv=None):
    _timing.main(__doc__.split("\n")[0], cases, SHAPES, QUICK, argv, extra_rows, LARGE)


if __name__ == "__main__":
    main()
