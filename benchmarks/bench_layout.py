"""Channels-last: native kernels versus a transpose wrapper, side by side.

    python benchmarks/bench_layout.py            # the tracked shapes
    python benchmarks/bench_layout.py --quick    # tiny shapes (smoke test)

For each op and shape, with the input already channels-last ``(N, *S, C)``:
``native`` is ``channels_last=True``; ``transpose`` moves C to axis 1, runs
the channels-first op and moves it back (the wrapper the native path replaces);
``channels-first`` is the op on channels-first data (no layout work at all).
Two figures: the forward, and the train step ``grad(sum(w * pool(x)))``.
Ratios are to ``transpose``; medians of interleaved runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing

import jaxpool

# (name, channels-first shape, op(x, channels_last) -> (values, indices))
SHAPES = [
    (
        "pool3d 2x32x32^3 k2 s2",
        (2, 32, 32, 32, 32),
        lambda x, cl: jaxpool.max_pool3d_with_argmax(x, 2, channels_last=cl),
    ),
    (
        "pool3d 2x32x32^3 k3 s2 p1",
        (2, 32, 32, 32, 32),
        lambda x, cl: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, channels_last=cl),
    ),
    (
        "pool2d 8x64x112^2 k3 s2 p1",
        (8, 64, 112, 112),
        lambda x, cl: jaxpool.max_pool2d_with_argmax(x, 3, 2, 1, channels_last=cl),
    ),
    (
        "adaptive2d 8x64x56^2 -> 7^2",
        (8, 64, 56, 56),
        lambda x, cl: jaxpool.adaptive_max_pool2d(x, 7, channels_last=cl),
    ),
]
QUICK = [
    (
        "pool3d 1x4x8^3 k3 s2 p1",
        (1, 4, 8, 8, 8),
        lambda x, cl: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, channels_last=cl),
    ),
    (
        "adaptive2d 2x4x9^2 -> 4^2",
        (2, 4, 9, 9),
        lambda x, cl: jaxpool.adaptive_max_pool2d(x, 4, channels_last=cl),
    ),
]


def _contenders(op):
    def native(x):
        return op(x, True)

    def transpose(x):
        values, indices = op(jnp.moveaxis(x, -1, 1), False)
        return jnp.moveaxis(values, 1, -1), jnp.moveaxis(indices, 1, -1)

    def first(x):
        return op(x, False)

    return {"native": native, "transpose": transpose, "channels-first": first}


def cases(shapes, dtype, reps, torch, bandwidth):
    del torch  # no torch rows: this compares jaxpool's layouts
    rows = []
    for name, shape, op in shapes:
        x_first = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        x_last = jnp.asarray(np.moveaxis(x_first, 1, -1).copy())
        x_first = jnp.asarray(x_first)
        inputs = {"native": x_last, "transpose": x_last, "channels-first": x_first}
        for figure in ("forward", "train step"):
            fns = {}
            for contender, f in _contenders(op).items():
                x = inputs[contender]
                if figure == "forward":
                    jitted = jax.jit(f)
                    fns[contender] = lambda j=jitted, x=x: j(x)
                else:
                    w = jnp.ones_like(f(x)[0])
                    step = jax.jit(
                        jax.grad(lambda x, w, f=f: jnp.sum(w * f(x)[0]), argnums=0)
                    )
                    fns[contender] = lambda s=step, x=x, w=w: s(x, w)
            timings = dict(
                zip(fns, _timing.interleaved(list(fns.values()), reps), strict=True)
            )
            moved = _timing.nbytes(x_first) * (1 if figure == "forward" else 2)
            for contender, t in timings.items():
                rows.append(
                    dict(
                        shape=name,
                        figure=figure,
                        contender=contender,
                        median_ms=t.median * 1e3,
                        low_ms=t.low * 1e3,
                        high_ms=t.high * 1e3,
                        ratio=t.median / timings["transpose"].median,
                        gbps=moved / t.median / 1e9,
                        roofline=moved / t.median / bandwidth,
                    )
                )
    return rows


def main(argv=None):
    _timing.main(__doc__.split("\n")[0], cases, SHAPES, QUICK, argv)


if __name__ == "__main__":
    main()
