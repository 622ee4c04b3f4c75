"""Where the time goes: per-XLA-op time of jaxpool's programs, from jax.profiler.

    python benchmarks/profile_ops.py                  # the tracked shapes
    python benchmarks/profile_ops.py --quick          # tiny shapes (smoke test)
    python benchmarks/profile_ops.py --json benchmarks/results/profile_cpu.json
    python benchmarks/profile_ops.py --large --implementation pallas --torch cuda

For each case of bench_max_pool3d.py and bench_adaptive_max_pool2d.py, runs the
jitted forward, backward (scatter) and train step ``grad(sum(w * pool(x)))``
back to back under ``jax.profiler.trace``, and prints the XLA ops (on CPU the
runtime's thunks: fusions, scatters, loops; on a GPU its kernels) that took the
time, in microseconds per call, with the median wall time of the whole
program. Ops that run in parallel (XLA:CPU runs independent thunks
concurrently) can sum to more than the wall time. ``--implementation`` picks
jaxpool's kernels; ``--torch DEVICE`` adds torch's forward and backward, from
``torch.profiler`` (its kernels on CUDA).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adaptive_max_pool2d
import bench_max_pool3d

POOLS = [  # (N, C, D, H, W), kernel, stride, padding
    ((2, 32, 32, 32, 32), 2, 2, 0),
    ((2, 32, 32, 32, 32), 3, 2, 1),
    ((1, 16, 48, 48, 48), 3, 1, 1),
]
ADAPTIVE = [((8, 64, 56, 56), (7, 7)), ((8, 64, 50, 50), (7, 7))]
ADAPTIVE += [((4, 32, 97, 131), (13, 17))]
QUICK_POOLS = [((1, 2, 8, 8, 8), 3, 2, 1)]
LARGE_POOLS = [((8, 32, 64, 64, 64), 2, 2, 0), ((8, 32, 64, 64, 64), 3, 2, 1)]
LARGE_POOLS += [((2, 32, 96, 96, 96), 3, 1, 1)]
LARGE_ADAPTIVE = [((256, 64, 56, 56), (7, 7)), ((128, 64, 97, 131), (13, 17))]
QUICK_ADAPTIVE = [((1, 2, 10, 9), (3, 4))]
# Trace events that are not XLA ops: Python frames, the runtime's own spans.
NOT_OPS = ("$", "Pjit", "Common", "Thunk", "Parse", "end: ", "Wait", "Threadpool")
NOT_OPS += ("Python", "Allocate", "Handle", "PjRt", "PJRT_", "[0] ", "MutexLock")


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
        name = event.get("name", "")
        if (
            event.get("ph") == "X"
            and not name.startswith(NOT_OPS)
            and not name.endswith("XLA GPU module")  # the whole program's span
        ):
            spent[event["name"]] += event["dur"] / calls
    return statistics.median(walls), dict(spent)


def profile_torch(fn, calls: int, torch) -> tuple[float, dict[str, float]]:
    """:func:`profile` for a torch function: ``torch.profiler``'s time per op
    (its kernels' on a GPU)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        fn()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    walls = []
    with torch_profile(activities=activities) as prof:
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            sync()
            walls.append(time.perf_counter() - start)
    spent = {}
    for event in prof.key_averages():
        device = getattr(event, "self_device_time_total", None)
        if device is None:
            device = getattr(event, "self_cuda_time_total", 0)
        us = device if cuda else event.self_cpu_time_total
        if us > 0:
            spent[event.key] = us / calls
    return statistics.median(walls), spent


def programs(pool, backward, x, implementation, torch_case, torch):
    """The forward, backward and train step of one case as ``(profiler, fn,
    args)``, and torch's forward and backward with ``torch_case``."""
    kw = dict(implementation=implementation)
    values, indices = jax.jit(lambda x: pool(x, **kw))(x)
    g = jnp.asarray(np.random.default_rng(1).standard_normal(values.shape), x.dtype)
    x_struct = jax.ShapeDtypeStruct(x.shape, x.dtype)
    step = jax.grad(lambda x, w: jnp.sum(w * pool(x, **kw)[0]))
    algorithm = "gather" if implementation == "pallas" else "scatter"
    bwd = jax.jit(lambda g, i: backward(g, x_struct, i, algorithm=algorithm, **kw))
    progs = {
        "forward": (profile, jax.jit(lambda x: pool(x, **kw)), (x,)),
        f"backward {algorithm}": (profile, bwd, (g, indices)),
        "train step": (profile, jax.jit(step), (x, g)),
    }
    if torch is not None:
        torch_pool, torch_backward, device = torch_case
        xt = torch.from_numpy(np.array(x)).to(device)
        _, it = torch_pool(xt)
        gt = torch.from_numpy(np.array(g)).to(device)
        progs["torch forward"] = (profile_torch, lambda: torch_pool(xt), None)
        progs["torch backward"] = (
            profile_torch,
            lambda: torch_backward(gt, xt, it),
            None,
        )
    return progs


def cases(quick: bool, large: bool, implementation: str, torch, device: str):
    pools = QUICK_POOLS if quick else LARGE_POOLS if large else POOLS
    adaptive = QUICK_ADAPTIVE if quick else LARGE_ADAPTIVE if large else ADAPTIVE
    rng = np.random.default_rng(0)
    for module, shapes in (
        (bench_max_pool3d, pools),
        (bench_adaptive_max_pool2d, adaptive),
    ):
        for case in shapes:
            name, pool, backward, torch_pool, torch_backward = module.ops(case, torch)
            x = jnp.asarray(rng.standard_normal(case[0]), jnp.float32)
            torch_case = (torch_pool, torch_backward, device)
            yield name, programs(pool, backward, x, implementation, torch_case, torch)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls")
    parser.add_argument("--top", type=int, default=6, help="ops shown per program")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--large", action="store_true", help="the GPU shapes")
    parser.add_argument("--implementation", default="xla", choices=["xla", "pallas"])
    parser.add_argument(
        "--torch", metavar="DEVICE", choices=["cpu", "cuda"], help="profile torch too"
    )
    args = parser.parse_args(argv)
    torch = None
    if args.torch:
        import torch
    print(
        f"date={time.strftime('%Y-%m-%d')}, jax={jax.__version__}, "
        f"backend={jax.default_backend()}, calls={args.calls}, "
        f"implementation={args.implementation}"
    )
    rows = []
    every = cases(args.quick, args.large, args.implementation, torch, args.torch)
    runs = [(name, *item) for name, progs in every for item in progs.items()]
    # torch's profiler keeps CUPTI once it has run, and jax.profiler then sees
    # no GPU kernels (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED): every
    # jaxpool program first, then torch's.
    runs.sort(key=lambda run: run[2][0] is profile_torch)
    for name, figure, (profiler, fn, fn_args) in runs:
        if fn_args is None:
            wall, spent = profiler(fn, args.calls, torch)
        else:
            wall, spent = profiler(fn, fn_args, args.calls)
        top = sorted(spent.items(), key=lambda kv: -kv[1])[: args.top]
        ops = ", ".join(f"{op} {us:.0f}" for op, us in top)
        print(f"{name:28s} {figure:11s} wall {wall * 1e3:7.3f} ms | us: {ops}")
        rows.append(dict(shape=name, figure=figure, wall_ms=wall * 1e3, ops=top))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
