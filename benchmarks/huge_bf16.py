"""A tensor of more than 2**31 elements: forward and backward, checked.

    python benchmarks/huge_bf16.py                       # (2, 65, 256, 256, 256) bf16
    python benchmarks/huge_bf16.py --algorithm scatter   # the default backward
    python benchmarks/huge_bf16.py --shape 1 2 32 32 32  # a small dry run

A bfloat16 input of 2 x 65 x 256^3 = 2.18e9 elements (4.06 GiB), kernel 2,
stride 2: the forward, then the backward. Not a test (it needs most of a
24 GiB machine and a few minutes); its output is recorded in the closing notes
and the README. It checks, exactly against ``jaxpool.reference``, 16^3
sub-cubes of several planes, the last plane among them (whose elements lie past
2**31 in the flat array), and that every plane's gradient sums to its
cotangent's sum (no gradient lost or sent to another plane). It prints the
times and the process's peak resident memory after each phase.

The input is built plane by plane in NumPy (no float32 copy of the whole
tensor). Disjoint windows give each input element at most one gradient, so the
"gather" backward (elementwise for disjoint windows) needs no float32
accumulator; "scatter" accumulates 16-bit gradients in float32 and rounds once,
a float32 temporary of the input's size.
"""

from __future__ import annotations

import argparse
import math
import resource
import time

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jaxpool
from jaxpool import reference


def peak_gib() -> float:
    """Peak resident memory of this process so far (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def build(shape: tuple[int, ...], seed: int) -> np.ndarray:
    host = np.empty(shape, ml_dtypes.bfloat16)
    rng = np.random.default_rng(seed)
    for n, c in np.ndindex(*shape[:2]):
        host[n, c] = rng.standard_normal(shape[2:], np.float32).astype(host.dtype)
    return host


def check_subcubes(x, values, indices, grad, g, planes, side=16) -> int:
    """Exact oracle checks of ``side``^3 sub-cubes; returns how many passed."""
    spatial = x.shape[2:]
    passed = 0
    for n, c in planes:
        middle = tuple(
            min(v, s - side) for v, s in zip((96, 32, 160), spatial, strict=True)
        )
        for corner in ((0, 0, 0), tuple(s - side for s in spatial), middle):
            d, h, w = corner
            cube = np.asarray(x[n, c, d : d + side, h : h + side, w : w + side])
            want_v, want_i = reference.max_pool(
                cube, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False
            )
            od, oh, ow = d // 2, h // 2, w // 2
            half = side // 2
            block = (n, c, slice(od, od + half), slice(oh, oh + half))
            block += (slice(ow, ow + half),)
            local = np.unravel_index(want_i, (side,) * 3)
            offset = [a + b for a, b in zip(local, corner, strict=True)]
            want_global = np.ravel_multi_index(offset, spatial)
            ok = (np.asarray(values[block]) == want_v).all()
            ok &= (np.asarray(indices[block]) == want_global).all()
            want_g = reference.scatter_add(
                np.asarray(g[block]).astype(np.float64), want_i, (side,) * 3
            ).astype(x.dtype)
            got_g = np.asarray(grad[n, c, d : d + side, h : h + side, w : w + side])
            ok &= (got_g == want_g).all()
            passed += int(ok)
            print(f"  plane ({n}, {c}) sub-cube at {corner}: {'ok' if ok else 'FAIL'}")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", type=int, nargs=5, default=(2, 65, 256, 256, 256))
    parser.add_argument("--algorithm", default="gather", choices=["gather", "scatter"])
    args = parser.parse_args(argv)
    shape = tuple(args.shape)
    elements = math.prod(shape)
    print(
        f"jax {jax.__version__}; input {shape} bfloat16: {elements:.3e} elements "
        f"({elements / 2**31:.2f} x 2**31), {elements * 2 / 2**30:.2f} GiB; "
        f"backward algorithm {args.algorithm!r}"
    )

    t = time.perf_counter()
    host = build(shape, 0)
    x = jax.device_put(host)
    del host
    x.block_until_ready()
    print(f"built in {time.perf_counter() - t:.1f} s; peak {peak_gib():.2f} GiB")

    t = time.perf_counter()
    values, indices = jax.jit(lambda x: jaxpool.max_pool3d_with_argmax(x, 2))(x)
    indices.block_until_ready()
    print(f"forward {time.perf_counter() - t:.1f} s; peak {peak_gib():.2f} GiB")

    struct = jax.ShapeDtypeStruct(x.shape, x.dtype)
    backward = jax.jit(
        lambda g, i: jaxpool.max_pool3d_with_argmax_backward(
            g, struct, i, 2, algorithm=args.algorithm
        )
    )
    g = values  # any cotangent; the pooled values are at hand
    t = time.perf_counter()
    grad = backward(g, indices)
    grad.block_until_ready()
    print(f"backward {time.perf_counter() - t:.1f} s; peak {peak_gib():.2f} GiB")

    last = (shape[0] - 1, shape[1] - 1)
    planes = [(0, 0), (shape[0] - 1, shape[1] // 2), last]
    passed = check_subcubes(x, values, indices, grad, g, planes)
    sums = jax.jit(lambda a: jnp.sum(a.astype(jnp.float32), axis=(2, 3, 4)))
    got, want = np.asarray(sums(grad)), np.asarray(sums(g))
    planes_ok = np.allclose(got, want, rtol=1e-4, atol=1e-2)
    print(f"per-plane gradient sums equal the cotangent sums: {planes_ok}")
    assert int(indices.max()) < math.prod(shape[2:]) and int(indices.min()) >= 0
    ok = passed == 3 * len(planes) and planes_ok
    print(f"{'PASS' if ok else 'FAIL'}; peak {peak_gib():.2f} GiB")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
