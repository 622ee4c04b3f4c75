"""The case tables every test file draws from: configurations of each op family,
the programs lowered for each platform, and the property sweeps' strategies.

A configuration is data, not a test: the test files cross it with dtypes and
kernel forms (``helpers.FORMS``), and every input kind goes into one call's
planes (``helpers.make_planes``), so a table row costs one compile per dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

import jaxpool

DTYPES = ["float16", "bfloat16", "float32", "float64"]
INPUT_KINDS = ["random", "ties", "nan", "inf"]

# ------------------------------------------------------------------- pools

# name: (nd, shape, the op's keyword arguments). Every argument form, ceil_mode
# where the last-window drop fires, padding k // 2 and (lo, hi) pairs,
# dilation 2 and 3 (with windows of no in-bounds tap), stride > kernel,
# unbatched inputs, N = 0.
POOLS = {
    "3d-k2-int": (3, (2, 3, 6, 7, 8), dict(kernel_size=2)),
    "3d-k2-len1-stride-empty": (3, (1, 2, 5, 6, 4), dict(kernel_size=(2,), stride=())),
    "3d-len3-all": (
        3,
        (2, 2, 7, 6, 5),
        dict(kernel_size=(3, 2, 2), stride=(2, 1, 3), padding=(1, 1, 0)),
    ),
    "3d-k3-s2-p1-ceil": (
        3,
        (1, 3, 6, 7, 8),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    ),
    "3d-ceil-drop-fires": (
        3,
        (1, 2, 5, 5, 5),
        dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
    ),
    "3d-k3-s1-p1": (3, (1, 2, 5, 6, 7), dict(kernel_size=3, stride=1, padding=1)),
    "3d-k4-s3-p2-ceil": (
        3,
        (1, 2, 9, 8, 7),
        dict(kernel_size=4, stride=3, padding=2, ceil_mode=True),
    ),
    "3d-dilation2": (3, (1, 2, 7, 6, 8), dict(kernel_size=2, stride=1, dilation=2)),
    "3d-dilation3-empty-window": (
        3,
        (1, 2, 2, 2, 2),
        dict(kernel_size=2, stride=1, padding=1, dilation=3),
    ),
    "3d-dilation-mixed": (
        3,
        (2, 1, 6, 7, 8),
        dict(
            kernel_size=(1, 3, 2),
            stride=(1, 2, 2),
            padding=(0, 1, 1),
            dilation=(1, 2, 3),
            ceil_mode=True,
        ),
    ),
    "3d-stride-gt-kernel": (3, (1, 2, 8, 7, 9), dict(kernel_size=2, stride=3)),
    "3d-4d-input": (3, (3, 6, 5, 6), dict(kernel_size=2, padding=1)),
    "3d-n0": (3, (0, 2, 4, 4, 4), dict(kernel_size=2)),
    "1d-k2": (1, (2, 3, 9), dict(kernel_size=2)),
    "1d-k3-s2-p1-ceil": (
        1,
        (2, 3, 10),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    ),
    "1d-dilation3-empty-window": (
        1,
        (1, 2, 2),
        dict(kernel_size=2, stride=1, padding=1, dilation=3),
    ),
    "1d-2d-input": (
        1,
        (3, 7),
        dict(kernel_size=4, stride=3, padding=2, ceil_mode=True),
    ),
    "2d-k2": (2, (2, 3, 6, 7), dict(kernel_size=2)),
    "2d-k3-s1-p1": (2, (1, 2, 6, 7), dict(kernel_size=3, stride=1, padding=1)),
    "2d-mixed-ceil": (
        2,
        (1, 2, 7, 8),
        dict(
            kernel_size=(3, 2),
            stride=(2, 3),
            padding=1,
            dilation=(2, 1),
            ceil_mode=True,
        ),
    ),
    "2d-3d-input": (
        2,
        (4, 5, 5),
        dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0)),
    ),
    # Windows with no in-bounds tap whose index (the first non-negative tap,
    # out of bounds along W) aliases an element of the next row: -inf, and the
    # gradient goes where the index points (found by hypothesis).
    "2d-empty-window-aliases": (
        2,
        (2, 3, 2, 1),
        dict(kernel_size=(1, 2), stride=1, padding=(0, 1), dilation=(1, 2)),
    ),
    "2d-empty-window-aliases-in-span": (
        2,
        (2, 3, 3, 2),
        dict(kernel_size=2, stride=1, padding=1, dilation=3),
    ),
    "2d-asymmetric-pairs": (
        2,
        (1, 2, 6, 7),
        dict(kernel_size=(3, 2), stride=(2, 1), padding=((0, 2), (1, 0))),
    ),
    "3d-asymmetric-ceil": (
        3,
        (1, 2, 5, 6, 5),
        dict(
            kernel_size=(2, 3, 2),
            stride=2,
            padding=((1, 0), (0, 2), (1, 1)),
            ceil_mode=True,
        ),
    ),
}

# --------------------------------------------------------------- adaptive

# name: (nd, shape, output_size).
ADAPTIVE = {
    "2d-integer-ratio": (2, (2, 3, 8, 8), (4, 2)),
    "2d-non-integer": (2, (2, 3, 10, 9), (3, 4)),
    "2d-out-larger-than-in": (2, (1, 2, 5, 7), (8, 11)),
    "2d-none-entry": (2, (2, 2, 6, 7), (None, 3)),
    "2d-int-size": (2, (1, 3, 9, 11), 4),
    "2d-global": (2, (2, 2, 5, 6), 1),
    "2d-uniform-overlap-50to7": (2, (1, 2, 50, 50), 7),
    "2d-97x131-to-13x17": (2, (1, 2, 97, 131), (13, 17)),
    "2d-3d-input": (2, (3, 7, 9), (2, 4)),
    "2d-n0": (2, (0, 3, 6, 6), (4, 4)),
    "1d-non-integer": (1, (2, 3, 10), (4,)),
    "1d-upsample": (1, (3, 5), (7,)),
    "1d-one-element-upsample": (1, (2, 3, 1), (3,)),  # found by hypothesis
    "3d-non-integer": (3, (1, 2, 5, 7, 6), (3, 4, 4)),
    "3d-uniform-4d-input": (3, (2, 4, 6, 8), (2, 3, 4)),
}

# ------------------------------------------------------------- fractional

# name: (nd, shape, kernel, output_size).
FRACTIONAL = {
    "2d-k2": (2, (2, 3, 9, 8), (2, 2), (5, 4)),
    "2d-k3-mixed": (2, (1, 2, 11, 13), (3, 2), (6, 9)),
    "2d-out1": (2, (2, 2, 5, 6), (2, 3), (1, 2)),
    "2d-tight": (2, (1, 3, 7, 7), (2, 2), (6, 6)),  # alpha = 1: stride 1
    "2d-unbatched": (2, (3, 10, 9), (2, 2), (4, 5)),
    "3d-k2": (3, (1, 2, 7, 8, 9), (2, 2, 2), (3, 4, 5)),
    "3d-mixed-unbatched": (3, (2, 6, 5, 9), (3, 1, 2), (3, 4, 4)),
}
# (size, output_size, kernel) of one axis: PyTorch's window starts.
FRACTIONAL_WINDOWS = [
    (5, 3, 2),
    (25, 12, 3),
    (37, 19, 3),
    (61, 40, 2),
    (10, 1, 3),
    (300, 290, 2),
]

# ----------------------------------------------------------------- torch

# PyTorch's CPU kernels as the second reference: (nd, shape, kwargs) of
# torch.nn.functional.max_pool{nd}d.
TORCH_POOLS = [
    (3, (2, 3, 6, 7, 8), dict(kernel_size=2)),
    (
        3,
        (2, 2, 7, 6, 5),
        dict(kernel_size=(3, 2, 2), stride=(2, 1, 3), padding=(1, 1, 0)),
    ),
    (3, (1, 3, 6, 7, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (3, (1, 2, 5, 5, 5), dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
    (3, (1, 2, 5, 6, 7), dict(kernel_size=3, stride=1, padding=1)),
    (
        3,
        (1, 2, 7, 6, 8),
        dict(kernel_size=(2, 3, 2), stride=1, padding=1, dilation=(2, 1, 3)),
    ),
    # A window with no in-bounds tap (index 14 in a 2x2x2 plane).
    (3, (1, 2, 2, 2, 2), dict(kernel_size=2, stride=1, padding=1, dilation=3)),
    (3, (3, 6, 5, 6), dict(kernel_size=2, stride=3)),
    (1, (2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (1, (3, 9), dict(kernel_size=2, dilation=2)),
    (2, (2, 3, 7, 8), dict(kernel_size=2)),
    (2, (1, 2, 9, 7), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1))),
    (2, (2, 5, 6), dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True)),
    (2, (2, 3, 2, 1), dict(kernel_size=(1, 2), padding=(0, 1), dilation=(1, 2))),
]
# (nd, shape, output_size) of torch.nn.functional.adaptive_max_pool{nd}d.
TORCH_ADAPTIVE = [
    (2, (2, 3, 10, 9), (3, 4)),
    (2, (2, 2, 8, 8), (4, 2)),
    (2, (1, 2, 5, 7), (8, 11)),
    (2, (2, 2, 6, 7), (None, 3)),
    (2, (3, 7, 9), 4),
    (2, (1, 2, 50, 50), 7),
    (1, (2, 3, 10), 4),
    (1, (3, 5), 8),
    (3, (1, 2, 5, 7, 6), (3, 4, None)),
    (3, (2, 6, 6, 9), 3),
]
# max_unpool{1,2,3}d called as PyTorch calls it: (nd, pool input shape, the
# pool's window arguments, which the unpool takes too), each restored to its
# shape by PyTorch's default size. The last is unbatched.
TORCH_UNPOOLS = [
    (1, (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
    (2, (2, 3, 7, 8), dict(kernel_size=2)),
    (2, (1, 2, 9, 7), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1))),
    (3, (1, 2, 6, 4, 6), dict(kernel_size=2, stride=2, padding=1)),
    (3, (2, 7, 7, 5), dict(kernel_size=3, stride=(2, 1, 2), padding=1)),
]
# (nd, shape, kernel, output_size) of fractional_max_pool{nd}d; wide planes give
# 16-bit windows that differ from float32's and, in bfloat16, repeated starts.
TORCH_FRACTIONAL = [
    (2, (2, 3, 9, 8), (2, 2), (5, 4)),
    (2, (1, 4, 13, 11), (3, 2), (9, 5)),
    (2, (3, 7, 9), (2, 3), (4, 4)),
    (2, (1, 2, 5, 300), (2, 2), (3, 290)),
    (3, (2, 2, 7, 8, 9), (2, 2, 3), (3, 4, 5)),
    (3, (3, 6, 5, 7), (2, 1, 2), (4, 4, 3)),
]

# ----------------------------------------------------------------- torchax

# PyTorch's OpInfo entries (name, variant) for the ops jaxpool.torchax defines,
# run through torchax (tests/test_torchax.py), their error inputs too.
TORCHAX_OPINFO = [
    ("nn.functional.max_pool1d", ""),
    ("nn.functional.max_pool2d", ""),
    ("nn.functional.max_pool3d", ""),
    ("max_pool2d_with_indices_backward", ""),
    ("nn.functional.adaptive_max_pool1d", ""),
    ("nn.functional.adaptive_max_pool2d", ""),
    ("nn.functional.adaptive_max_pool3d", ""),
    ("nn.functional.fractional_max_pool2d", ""),
    ("nn.functional.fractional_max_pool3d", ""),
    ("nn.functional.max_unpool1d", ""),
    ("nn.functional.max_unpool2d", ""),
    ("nn.functional.max_unpool3d", ""),
    ("nn.functional.max_unpool1d", "grad"),
    ("nn.functional.max_unpool2d", "grad"),
    ("nn.functional.max_unpool3d", "grad"),
]

# ------------------------------------------------------------ TensorFlow

NAN, INF = float("nan"), float("inf")

# TensorFlow's choice in a 2x2 window (a, b / c, d in row-major order): the
# value and the window position (0-3) of tf.nn.max_pool_with_argmax on CPU,
# as TensorFlow 2.21 gives them (tests/test_tf.py checks them against it):
# ties keep the first, NaN is skipped unless it is the first element.
TF_WINDOWS = [
    ("ties", (5, 5, 5, 5), 5, 0),
    ("first of tied maxima", (1, 5, 2, 5), 5, 1),
    ("row-major, not column-major", (1, 5, 5, 1), 5, 1),
    ("-0.0 then +0.0", (-0.0, 0.0, -1, -1), -0.0, 0),
    ("+0.0 then -0.0", (0.0, -0.0, -1, -1), 0.0, 0),
    ("NaN skipped", (1, NAN, NAN, 3), 3, 3),
    ("NaN only", (NAN, NAN, NAN, NAN), NAN, 0),
    ("NaN first, then numbers", (NAN, 1, 2, 9), NAN, 0),
    ("numbers, then NaN", (1, 7, NAN, 2), 7, 1),
    ("NaN first, then -inf", (NAN, -INF, -INF, -INF), NAN, 0),
    ("-inf first, then NaN", (-INF, NAN, NAN, -INF), -INF, 0),
    ("-inf only", (-INF, -INF, -INF, -INF), -INF, 0),
    ("NaN first, then +inf", (NAN, INF, 1, 2), NAN, 0),
    ("+inf first, then NaN", (INF, NAN, 1, 2), INF, 0),
    ("-inf, NaN, then a number", (-INF, NAN, 2, 1), 2, 2),
    ("-inf and NaN before a negative", (-INF, NAN, -INF, -5), -5, 3),
    ("NaN between tied maxima", (3, NAN, -INF, 3), 3, 0),
]

# (name, 2-D input, ksize, strides, padding, values, indices): "SAME" windows
# at the bottom and right edges, whose in-bounds elements are all NaN or all
# -inf, and windows whose first in-bounds element is padding's neighbour.
TF_EDGES = [
    (
        "last row and column NaN",
        [[0, 1, NAN], [3, 4, NAN], [NAN, NAN, NAN]],
        2,
        2,
        "SAME",
        [[4, NAN], [NAN, NAN]],
        [[4, 2], [6, 8]],
    ),
    (
        "last row and column -inf",
        [[0, 1, -INF], [3, 4, -INF], [-INF, -INF, -INF]],
        2,
        2,
        "SAME",
        [[4, -INF], [-INF, -INF]],
        [[4, 2], [6, 8]],
    ),
    (
        "every window starts at a NaN",
        [[NAN, -INF], [-INF, -INF]],
        3,
        1,
        "SAME",
        [[NAN, NAN], [NAN, NAN]],
        [[0, 0], [0, 0]],
    ),
]

# tf.nn.max_pool_with_argmax's configurations: (name, NHWC shape, ksize,
# strides, padding, include_batch_in_index, how the op is called: "jit" or
# "vmap" over a leading axis, the gradient's algorithm). Every argument form,
# odd sizes with "SAME", windows larger than the input, strides larger than
# the window, overlapping windows (9 gradients on one element), then random
# ones (tf_random_pools). The inputs hold ties, NaN and +-inf in their planes.
TF_POOLS = [
    ("segnet-2x2", (2, 6, 8, 3), 2, 2, "VALID", False, "jit", "auto"),
    ("odd-same-k3-s2", (2, 7, 9, 2), 3, 2, "SAME", True, "vmap", "auto"),
    (
        "window-larger-than-input",
        (1, 2, 3, 2),
        [4, 5],
        1,
        "SAME",
        False,
        "jit",
        "gather",
    ),
    ("stride-gt-window", (2, 9, 10, 2), [2], [3, 4], "VALID", True, "jit", "scatter"),
    (
        "stride-gt-window-same",
        (1, 7, 8, 3),
        (2, 1),
        (4, 3),
        "SAME",
        True,
        "vmap",
        "auto",
    ),
    ("4-lists", (1, 5, 6, 2), [1, 3, 2, 1], [1, 2, 1, 1], "SAME", False, "jit", "auto"),
    ("k1", (1, 3, 4, 2), 1, 1, "VALID", False, "vmap", "gather"),
    ("overlap-k3-s1", (1, 6, 5, 2), 3, 1, "SAME", True, "jit", "scatter"),
    ("one-row", (2, 1, 11, 2), [1, 3], [1, 2], "SAME", False, "jit", "auto"),
]


def tf_random_pools(count: int, seed: int) -> list[tuple]:
    """``count`` random rows in :data:`TF_POOLS`' form, drawn from ``seed``:
    sizes 1-9, windows 1-4 in every argument form, strides 1-5, both
    paddings ("VALID" only where the window fits), both index forms."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(count):
        h, w = (int(v) for v in rng.integers(1, 10, 2))
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        s = tuple(int(v) for v in rng.integers(1, 6, 2))
        fits = k[0] <= h and k[1] <= w
        padding = "VALID" if fits and rng.random() < 0.5 else "SAME"
        form = r % 3
        ksize = (k[0] if k[0] == k[1] else k, list(k), [1, *k, 1])[form]
        strides = [1, *s, 1] if form == 2 else s
        shape = (int(rng.integers(1, 3)), h, w, int(rng.integers(1, 4)))
        include = bool(rng.random() < 0.5)
        how = ("jit", "vmap")[r % 2]
        algorithm = ("auto", "scatter", "gather")[r % 3]
        name = f"random-{r}"
        rows.append((name, shape, ksize, strides, padding, include, how, algorithm))
    return rows


# SegNet's tf.scatter_nd unpooling: (name, NHWC shape of the pool's input,
# ksize, strides, padding). Disjoint windows; odd sizes with "SAME" (which
# tfa's inferred output shape gets wrong); overlapping windows, whose
# coinciding indices scatter_nd sums.
TF_UNPOOLS = [
    ("segnet-2x2", (2, 4, 6, 3), 2, 2, "VALID"),
    ("odd-same", (2, 5, 7, 2), 2, 2, "SAME"),
    ("overlap-k3-s1", (1, 5, 5, 2), 3, 1, "SAME"),
]

# ------------------------------------------------------------ unpool

# (nd, input shape, pool kwargs): disjoint windows, overlapping windows (equal
# indices), an output larger than the pooled input's extent (ceil_mode).
UNPOOLS = [
    (1, (2, 3, 9), dict(kernel_size=2)),
    (2, (2, 3, 7, 8), dict(kernel_size=2, stride=2)),
    (2, (1, 2, 7, 7), dict(kernel_size=3, stride=1, padding=1)),
    (3, (2, 2, 5, 6, 7), dict(kernel_size=2, stride=2, ceil_mode=True)),
    (3, (1, 3, 5, 5, 5), dict(kernel_size=3, stride=2, padding=1)),
]

# ------------------------------------------------- programs per platform


class Op(NamedTuple):
    """A public op on one input: ``forward(x) -> outputs`` and, for the pools,
    ``backward(g, x, indices, algorithm) -> grad``."""

    shape: tuple[int, ...]
    forward: Callable[..., Any]
    backward: Callable[..., Any] | None
    strided: bool  # regular windows: no gather in the accelerator forward


def _pool_op(nd: int, *args: Any) -> Op:
    fwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    return Op(
        (2, 3, *(9, 10, 11)[3 - nd :]),
        lambda x, **kw: fwd(x, *args, **kw),
        lambda g, x, i, **kw: bwd(g, x, i, *args, **kw),
        True,
    )


def _adaptive_op(nd: int, out: Any) -> Op:
    fwd = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    bwd = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    return Op(
        (2, 3, *(9, 10, 11)[3 - nd :]),
        lambda x, **kw: fwd(x, out, **kw),
        lambda g, x, i, **kw: bwd(g, x, i, **kw),
        False,
    )


def _unpool_op(nd: int) -> Op:
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    spatial = (8, 10, 12)[3 - nd :]

    def forward(x):
        values, indices = pool(x, 2)
        return unpool(values, indices, 2, output_size=spatial)

    return Op((2, 3, *spatial), forward, None, False)


# The ops lowered for each platform (tests/test_export.py, test_tpu_programs.py).
PROGRAM_OPS = {
    "max_pool1d k3 s2 p1": _pool_op(1, 3, 2, 1),
    "max_pool2d k3 s2 p1": _pool_op(2, 3, 2, 1),
    "max_pool3d k3 s2 p1": _pool_op(3, 3, 2, 1),
    "max_pool3d k2 s2": _pool_op(3, 2, 2),
    "max_pool3d k4 s1 p2 (axis passes)": _pool_op(3, 4, 1, 2),
    "max_pool2d k2 s1 p1 d3 (empty windows)": _pool_op(2, 2, 1, 1, 3),
    "adaptive_max_pool1d 11->4": _adaptive_op(1, 4),
    "adaptive_max_pool2d 10x11->3x4": _adaptive_op(2, (3, 4)),
    "adaptive_max_pool3d 9x10x11->2x3x4": _adaptive_op(3, (2, 3, 4)),
    "max_unpool1d": _unpool_op(1),
    "max_unpool2d": _unpool_op(2),
    "max_unpool3d": _unpool_op(3),
}
PROGRAM_POOLS = {n: op for n, op in PROGRAM_OPS.items() if op.backward is not None}
ALGORITHMS = ["auto", "scatter", "gather"]


def programs(name: str) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The forward, each standalone backward and ``jax.grad`` with each
    algorithm of one op of :data:`PROGRAM_OPS`, as ``(function, arguments)``."""
    op = PROGRAM_OPS[name]
    x = jax.ShapeDtypeStruct(op.shape, jnp.float32)
    found = {"forward": (op.forward, (x,))}
    if op.backward is None:  # an unpool: its gradient is a gather
        found["grad"] = (jax.grad(lambda x: jnp.sum(op.forward(x) ** 2)), (x,))
        return found
    out = jax.eval_shape(op.forward, x)[0]
    g, i = out, jax.ShapeDtypeStruct(out.shape, jnp.int32)
    for a in ALGORITHMS:
        backward = (lambda g, i, a=a: op.backward(g, x, i, algorithm=a), (g, i))
        found[f"backward {a}"] = backward
        loss = lambda x, a=a: jnp.sum(op.forward(x, algorithm=a)[0] ** 2)  # noqa: E731
        found[f"grad {a}"] = (jax.grad(loss), (x,))
    return found


# ---------------------------------------------------------- property sweeps


@st.composite
def pool_cases(draw):
    """A random valid strided pool: shapes, every padding form, ceil_mode,
    dilation, layouts, dtypes, input kinds, a seed."""
    nd = draw(st.integers(1, 3))
    kernel, stride, dilation, padding, sizes = [], [], [], [], []
    for _ in range(nd):
        k = draw(st.integers(1, 4))
        d = draw(st.sampled_from([1, 1, 2, 3]))
        if draw(st.integers(0, 3)) == 0:  # a Flax-style (lo, hi) pair
            p = (draw(st.integers(0, d * (k - 1))), draw(st.integers(0, d * (k - 1))))
        else:
            p = draw(st.integers(0, k // 2))
        lo, hi = (p, p) if isinstance(p, int) else p
        smallest = max(1, d * (k - 1) + 1 - lo - hi)
        kernel.append(k)
        stride.append(draw(st.integers(1, 4)))
        dilation.append(d)
        padding.append(p)
        sizes.append(smallest + draw(st.integers(0, 6)))
    lead = draw(st.sampled_from([(2, 3), (1, 2), (3,), (0, 2)]))
    return dict(
        nd=nd,
        shape=(*lead, *sizes),
        kernel=tuple(kernel),
        stride=tuple(stride),
        padding=tuple(padding),
        dilation=tuple(dilation),
        ceil_mode=draw(st.booleans()),
        channels_last=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        kind=draw(st.sampled_from(INPUT_KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def fractional_cases(draw):
    """A random fractional pool: kernels, input sizes, outputs from one window
    to the most PyTorch allows, layouts, batched or not, dtypes, input kinds,
    and a seed for the input and the samples."""
    nd = draw(st.integers(2, 3))
    strict = int(nd == 3)  # PyTorch's 3-D pool wants out + k - 1 < size, not <=
    kernel, sizes, out = [], [], []
    for _ in range(nd):
        k = draw(st.integers(1, 3))
        size = k + strict + draw(st.integers(0, 10))
        kernel.append(k)
        sizes.append(size)
        out.append(draw(st.integers(1, size - k + 1 - strict)))
    lead = draw(st.sampled_from([(2, 3), (1, 2), (3,)]))
    return dict(
        nd=nd,
        shape=(*lead, *sizes),
        kernel=tuple(kernel),
        output_size=tuple(out),
        channels_last=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        kind=draw(st.sampled_from(INPUT_KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def adaptive_cases(draw):
    """A random adaptive pool, output sizes below and above the input's."""
    nd = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 11)) for _ in range(nd)]
    out = [draw(st.one_of(st.integers(1, 13), st.none())) for _ in range(nd)]
    lead = draw(st.sampled_from([(2, 3), (1, 2), (3,)]))
    return dict(
        nd=nd,
        shape=(*lead, *sizes),
        output_size=tuple(out),
        channels_last=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        kind=draw(st.sampled_from(INPUT_KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )
