"""jaxpool's working tree against a git revision of it, in one process: the
same public op called through both, interleaved, medians.

    python benchmarks/side_by_side.py --rev 9463df7              # every case
    python benchmarks/side_by_side.py --rev 9463df7 --cases 3-D  # a regex
    python benchmarks/side_by_side.py --rev 9463df7 --step       # train steps

A form that changes must not make a program slower to run; this measures it
on the machine at hand, with both programs on it at once, so that its noise
hits both alike. The revision's package is extracted with ``git archive`` and
imported as ``jaxpool_at_<rev>`` (the package's modules import each other
relatively). Each case is ``jax.jit`` of the op with its arrays as arguments
(of ``jax.value_and_grad(sum(w * values))`` with ``--step``), compiled first
(the compile times are printed too, from JAX's caches cleared), then timed
round-robin (``_timing.interleaved``); both trees' outputs must be equal to
the bit, or the script fails.
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _timing  # noqa: E402

import jaxpool  # noqa: E402

# name: (op, input shape, the op's arguments after x, keyword arguments);
# fractional pools get their samples, an argument, drawn once.
CASES: dict[str, tuple[str, tuple[int, ...], tuple, dict[str, Any]]] = {
    "2-D fractional 8x16x32² k3 → 16²": (
        "fractional_max_pool2d", (8, 16, 32, 32), (3, 16), {}),
    "2-D fractional 8x32x64² k3 → 32²": (
        "fractional_max_pool2d", (8, 32, 64, 64), (3, 32), {}),
    "2-D fractional 8x32x64² k2 → 45²": (
        "fractional_max_pool2d", (8, 32, 64, 64), (2, 45), {}),
    "2-D fractional 16x64x112² k2 → 79²": (
        "fractional_max_pool2d", (16, 64, 112, 112), (2, 79), {}),
    "2-D fractional 16x64x112² k3 → 56²": (
        "fractional_max_pool2d", (16, 64, 112, 112), (3, 56), {}),
    "3-D fractional 2x16x16³ k3 → 8³": (
        "fractional_max_pool3d", (2, 16, 16, 16, 16), (3, 8), {}),
    "3-D fractional 4x16x32³ k3 → 16³": (
        "fractional_max_pool3d", (4, 16, 32, 32, 32), (3, 16), {}),
    "3-D fractional 4x32x64³ k2 → 45³": (
        "fractional_max_pool3d", (4, 32, 64, 64, 64), (2, 45), {}),
    "2-D adaptive 4x32x97x131 → 13x17": (
        "adaptive_max_pool2d", (4, 32, 97, 131), ((13, 17),), {}),
    "3-D adaptive 4x16x32³ → 5x6x7": (
        "adaptive_max_pool3d", (4, 16, 32, 32, 32), ((5, 6, 7),), {}),
    "3-D k3 s2 p1 8x32x32³": (
        "max_pool3d_with_argmax", (8, 32, 32, 32, 32), (3, 2, 1), {}),
}  # fmt: skip


def at_revision(rev: str) -> Any:
    """The ``jaxpool`` package of git revision ``rev``, imported as
    ``jaxpool_at_<rev>`` from a temporary folder."""
    root = HERE.parent
    name = "jaxpool_at_" + re.sub(r"\W", "_", rev)
    folder = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "jaxpool"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / "jaxpool").rename(folder / name)
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def program(package: Any, case: str, step: bool) -> tuple[Callable, list]:
    """``(jitted fn, its arguments)`` of ``case`` through ``package``."""
    op_name, shape, args, kwargs = CASES[case]
    op = getattr(package, op_name)
    x = jax.random.normal(jax.random.key(0), shape, jnp.float32)
    arrays = [x]
    if op_name.startswith("fractional"):
        nd = len(shape) - 2
        u = jax.random.uniform(jax.random.key(1), (*shape[:2], nd), jnp.float32)
        arrays.append(u)

    def pool(x: jax.Array, *more: jax.Array) -> Any:
        extra = {"samples": more[0]} if more else {}
        return op(x, *args, **kwargs, **extra)

    if not step:
        return jax.jit(pool), arrays
    w = jax.random.normal(jax.random.key(2), jax.eval_shape(pool, *arrays)[0].shape)

    def loss(x: jax.Array, w: jax.Array, *more: jax.Array) -> jax.Array:
        return jnp.sum(w * pool(x, *more)[0])

    return jax.jit(jax.value_and_grad(loss)), [x, w, *arrays[1:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the git revision to compare")
    parser.add_argument("--cases", default=".", help="a regex over the names")
    parser.add_argument("--step", action="store_true", help="time train steps")
    parser.add_argument("--reps", type=int, default=7)
    opts = parser.parse_args()
    before = at_revision(opts.rev)
    print(
        f"jaxpool {opts.rev} (before) against the working tree (now); jax "
        f"{jax.__version__}, {jax.devices()[0].device_kind}; "
        f"{'train steps' if opts.step else 'forwards'}, medians of {opts.reps} "
        "interleaved samples [min-max]"
    )
    for case in (c for c in CASES if re.search(opts.cases, c)):
        fns, compiled = [], []
        for package in (before, jaxpool):
            fn, arrays = program(package, case, opts.step)
            jax.clear_caches()
            start = time.perf_counter()
            fn.lower(*arrays).compile()
            compiled.append(time.perf_counter() - start)
            fns.append(lambda fn=fn, arrays=arrays: fn(*arrays))
        outs = [jax.tree.map(np.asarray, fn()) for fn in fns]
        for a, b in zip(*map(jax.tree.leaves, outs), strict=True):
            if not np.array_equal(a, b, equal_nan=True):
                raise SystemExit(f"{case}: the outputs differ")
        then, now = _timing.interleaved(fns, opts.reps)
        print(
            f"{case:36} before {then.ms()} now {now.ms()} "
            f"({now.median / then.median:.2f}x); compiled in "
            f"{compiled[0]:.2f} s, {compiled[1]:.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
