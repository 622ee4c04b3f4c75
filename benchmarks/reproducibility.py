"""Is each backward bitwise reproducible? Every contender runs many times on the
same inputs, and the distinct results are counted (1: reproducible).

    python benchmarks/reproducibility.py                  # the tracked shapes
    python benchmarks/reproducibility.py --quick          # tiny shapes (smoke test)
    python benchmarks/reproducibility.py --large --torch-device cuda   # on a GPU

Contenders: jaxpool's backward op with each algorithm and implementation
(``scatter``: XLA's scatter-add, atomics on a GPU; ``gather``: the
deterministic one, XLA and Pallas), ``jax.grad`` through the forward (the
default ``auto``), and torch's backward, also under
``torch.use_deterministic_algorithms(True)`` (which refuses some on CUDA).
Random float32 cotangents, so that the order of a sum shows in its bits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_adaptive_max_pool2d
import bench_max_pool3d


def _same_bits(a: Any, b: Any) -> bool:
    """Whether two results of one contender are the same bits, compared where
    they are (a GPU's results never cross to the host: a 268 MB gradient,
    hashed on the host twenty times, would take longer than the run)."""
    if isinstance(a, jax.Array):
        return bool(_equal_bits(a, b))
    import torch

    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(a.view(bits).equal(b.view(bits)))


@jax.jit
def _equal_bits(a: Any, b: Any) -> Any:
    bits = jnp.dtype(f"uint{a.dtype.itemsize * 8}")
    return jnp.array_equal(
        lax.bitcast_convert_type(a, bits), lax.bitcast_convert_type(b, bits)
    )


def _max_diff(a: Any, b: Any) -> float:
    if isinstance(a, jax.Array):
        return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b), initial=0.0))
    return float((a.float() - b).abs().max()) if a.numel() else 0.0


def distinct(fn: Any, runs: int) -> tuple[int, float]:
    """How many different results ``runs`` calls give, and the largest
    difference between any of them and the first."""
    first = fn()
    seen, spread = [first], 0.0
    for _ in range(runs - 1):
        out = fn()
        if not any(_same_bits(out, s) for s in seen):
            seen.append(out)
        spread = max(spread, _max_diff(out, first))
    return len(seen), spread


def contenders(case: Any, torch: Any, device: str, pallas: bool) -> dict[str, Any]:
    """``name -> zero-argument function`` for one case ``(name, x, pool,
    backward, torch_pool, torch_backward)``."""
    _, x_np, pool, backward, torch_pool, torch_backward = case
    x = jnp.asarray(x_np)
    values, indices = jax.jit(pool)(x)
    g = jnp.asarray(np.random.default_rng(1).standard_normal(values.shape), x.dtype)
    struct = jax.ShapeDtypeStruct(x.shape, x.dtype)
    fns: dict[str, Any] = {}
    kinds = [("xla", "scatter"), ("xla", "gather")]
    kinds += [("pallas", "gather")] if pallas else []
    for implementation, algorithm in kinds:
        bwd = jax.jit(
            lambda g, i, a=algorithm, m=implementation: backward(
                g, struct, i, algorithm=a, implementation=m
            )
        )
        fns[f"jaxpool {implementation} {algorithm}"] = lambda b=bwd: b(g, indices)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(w * pool(x)[0])))
    fns["jaxpool jax.grad (auto)"] = lambda: step(x, g)
    if torch is not None:
        xt = torch.from_numpy(x_np).to(device)
        _, it = torch_pool(xt)
        gt = torch.from_numpy(np.array(g)).to(device)

        def run_torch(deterministic: bool) -> Any:
            torch.use_deterministic_algorithms(deterministic)
            try:
                return torch_backward(gt, xt, it)
            finally:
                torch.use_deterministic_algorithms(False)

        fns["torch"] = lambda: run_torch(False)
        fns["torch deterministic mode"] = lambda: run_torch(True)
    return fns


def cases(shapes_3d: list[Any], shapes_2d: list[Any], torch: Any) -> list[Any]:
    """``(name, x, pool, backward, torch_pool, torch_backward)`` per shape, in
    the benchmarks' definitions."""
    rng = np.random.default_rng(0)
    out = []
    for module, shapes in (
        (bench_max_pool3d, shapes_3d),
        (bench_adaptive_max_pool2d, shapes_2d),
    ):
        for case in shapes:
            name, *calls = module.ops(case, torch)
            x = rng.standard_normal(case[0]).astype(np.float32)
            out.append((name, x, *calls))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 3 runs")
    parser.add_argument("--large", action="store_true", help="the GPU shapes")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-pallas", action="store_true")
    parser.add_argument("--torch-device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--json", metavar="PATH", help="also write the rows here")
    args = parser.parse_args(argv)
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch not installed: no torch rows")
    if args.quick:
        shapes = bench_max_pool3d.QUICK, bench_adaptive_max_pool2d.QUICK
    elif args.large:
        shapes = bench_max_pool3d.LARGE, bench_adaptive_max_pool2d.LARGE
    else:
        shapes = bench_max_pool3d.SHAPES, bench_adaptive_max_pool2d.SHAPES
    runs = 3 if args.quick else args.runs
    print(
        f"date={time.strftime('%Y-%m-%d')}, jax={jax.__version__}, "
        f"backend={jax.default_backend()}, torch={getattr(torch, '__version__', None)}"
        f" ({args.torch_device}), runs={runs}"
    )
    print(f"{'shape':<28} {'backward':<30} {'distinct results':>16} {'max diff':>10}")
    rows = []
    for case in cases(*shapes, torch):
        fns = contenders(case, torch, args.torch_device, not args.no_pallas)
        for name, fn in fns.items():
            try:
                count, spread = distinct(fn, runs)
                shown = f"{count:>16} {spread:>10.3g}"
            except RuntimeError as e:  # torch's deterministic mode refuses it
                count, spread = None, None
                shown = f"{'refused':>16} {str(e).splitlines()[0][:60]}"
            print(f"{case[0]:<28} {name:<30} {shown}", flush=True)
            rows.append(
                dict(shape=case[0], backward=name, distinct=count, spread=spread)
            )
    if args.json:
        Path(args.json).write_text(json.dumps(dict(rows=rows), indent=1))


if __name__ == "__main__":
    main()
