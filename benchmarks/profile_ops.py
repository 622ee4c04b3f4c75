"""Where the time goes: per-XLA-op time of jaxpool's programs, from jax.profiler.

    python benchmarks/profile_ops.py                  # the tracked shapes
    python benchmarks/profile_ops.py --quick          # tiny shapes (smoke test)
    python benchmarks/profile_ops.py --json benchmarks/results/profile_cpu.json

For each case of bench_max_pool3d.py and bench_adaptive_max_pool2d.py, runs the
jitted forward, backward (scatter) and train step ``grad(sum(w * pool(x)))``
back to back under ``jax.profiler.trace``, and prints the XLA ops (on CPU the
runtime's thunks: fusions, scatters, loops) that took the time, in microseconds
per call, with the median wall time of the whole program. Ops that run in
parallel (XLA:CPU runs independent thunks concurrently) can sum to more than
the wall time.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxpool

POOLS = [  # (N, C, D, H, W), kernel, stride, padding
    ((2, 32, 32, 32, 32), 2, 2, 0),
    ((2, 32, 32, 32, 32), 3, 2, 1),
    ((1, 16, 48, 48, 48), 3, 1, 1),
]
ADAPTIVE = [((8, 64, 56, 56), (7, 7)), ((8, 64, 50, 50), (7, 7))]
ADAPTIVE += [((4, 32, 97, 131), (13, 17))]
QUICK_POOLS = [((1, 2, 8, 8, 8), 3, 2, 1)]
QUICK_ADAPTIVE = [((1, 2, 10, 9), (3, 4))]
# Trace events that are not XLA ops: Python frames, the runtime's own spans.
NOT_OPS = ("$", "Pjit", "Common", "Thunk", "Parse", "end: ", "Wait", "Threadpool")
NOT_OPS += ("Python", "Allocate", "Handle")


def profile(fn, args, calls: int) -> tuple[float, dict[str, float]]:
    """Median wall seconds of ``fn(*args)`` and microseconds per call by op."""
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    walls = []
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            for _ in range(calls):
                start = time.perf_counter()
                jax.block_until_ready(fn(*args))
                walls.append(time.perf_counter() - start)
        (path,) = Path(trace_dir).rglob("*.trace.json.gz")
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    spent: dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.get("ph") == "X" and not event["name"].startswith(NOT_OPS):
            spent[event["name"]] += event["dur"] / calls
    return statistics.median(walls), dict(spent)


def programs(pool, backward, x):
    """The forward, backward and train step of one case, with their arguments."""
    values, indices = jax.jit(pool)(x)
    g = jnp.asarray(np.random.default_rng(1).standard_normal(values.shape), x.dtype)
    x_struct = jax.ShapeDtypeStruct(x.shape, x.dtype)
    step = jax.grad(lambda x, w: jnp.sum(w * pool(x)[0]))
    return {
        "forward": (jax.jit(pool), (x,)),
        "backward": (jax.jit(lambda g, i: backward(g, x_struct, i)), (g, indices)),
        "train step": (jax.jit(step), (x, g)),
    }


def cases(quick: bool):
    pools = QUICK_POOLS if quick else POOLS
    adaptive = QUICK_ADAPTIVE if quick else ADAPTIVE
    rng = np.random.default_rng(0)
    for shape, k, s, p in pools:
        x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
        yield (
            f"{'x'.join(map(str, shape))} k{k} s{s} p{p}",
            programs(
                lambda x, k=k, s=s, p=p: jaxpool.max_pool3d_with_argmax(x, k, s, p),
                lambda g, x, i, k=k, s=s, p=p: jaxpool.max_pool3d_with_argmax_backward(
                    g, x, i, k, s, p
                ),
                x,
            ),
        )
    for shape, out in adaptive:
        x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
        yield (
            f"{'x'.join(map(str, shape))} -> {'x'.join(map(str, out))}",
            programs(
                lambda x, out=out: jaxpool.adaptive_max_pool2d(x, out),
                jaxpool.adaptive_max_pool2d_backward,
                x,
            ),
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls")
    parser.add_argument("--top", type=int, default=6, help="ops shown per program")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    print(
        f"date={time.strftime('%Y-%m-%d')}, jax={jax.__version__}, "
        f"backend={jax.default_backend()}, calls={args.calls}"
    )
    rows = []
    for name, progs in cases(args.quick):
        for figure, (fn, fn_args) in progs.items():
            wall, spent = profile(fn, fn_args, args.calls)
            top = sorted(spent.items(), key=lambda kv: -kv[1])[: args.top]
            ops = ", ".join(f"{op} {us:.0f}" for op, us in top)
            print(f"{name:28s} {figure:11s} wall {wall * 1e3:7.3f} ms | us: {ops}")
            rows.append(dict(shape=name, figure=figure, wall_ms=wall * 1e3, ops=top))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
