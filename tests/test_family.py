"""The whole family: 1-D/2-D pools, 1-D/3-D adaptive pools, padding forms,
channels-last layouts, against the NumPy oracle, exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    INPUT_KINDS,
    assert_same,
    check_against_oracle,
    cotangent,
    make_input,
    rng_for,
)
from jax import lax

import jaxpool
from jaxpool import reference

POOL = {
    1: jaxpool.max_pool1d_with_argmax,
    2: jaxpool.max_pool2d_with_argmax,
    3: jaxpool.max_pool3d_with_argmax,
}
POOL_BWD = {
    1: jaxpool.max_pool1d_with_argmax_backward,
    2: jaxpool.max_pool2d_with_argmax_backward,
    3: jaxpool.max_pool3d_with_argmax_backward,
}
ADAPTIVE = {
    1: jaxpool.adaptive_max_pool1d,
    2: jaxpool.adaptive_max_pool2d,
    3: jaxpool.adaptive_max_pool3d,
}
ADAPTIVE_BWD = {
    1: jaxpool.adaptive_max_pool1d_backward,
    2: jaxpool.adaptive_max_pool2d_backward,
    3: jaxpool.adaptive_max_pool3d_backward,
}

# (nd, shape, kernel, stride, padding, dilation, ceil_mode); padding in the
# oracle's form (an int or a (lo, hi) pair per axis).
POOL_CONFIGS = {
    "1d-k2": (1, (2, 3, 9), (2,), (2,), (0,), (1,), False),
    "1d-k3-s2-p1-ceil": (1, (2, 3, 10), (3,), (2,), (1,), (1,), True),
    "1d-dilation3-empty-window": (1, (1, 2, 2), (2,), (1,), (1,), (3,), False),
    "1d-2d-input": (1, (3, 7), (4,), (3,), (2,), (1,), True),
    "2d-k2": (2, (2, 3, 6, 7), (2, 2), (2, 2), (0, 0), (1, 1), False),
    "2d-k3-s1-p1": (2, (1, 2, 6, 7), (3, 3), (1, 1), (1, 1), (1, 1), False),
    "2d-mixed-ceil": (2, (1, 2, 7, 8), (3, 2), (2, 3), (1, 1), (2, 1), True),
    "2d-3d-input": (2, (4, 5, 5), (2, 3), (1, 2), (1, 0), (1, 1), False),
    # Windows with no in-bounds tap whose index (the first non-negative tap,
    # out of bounds along W) aliases an element of the next row: -inf, and the
    # gradient goes where the index points (found by hypothesis).
    "2d-empty-window-aliases": (2, (2, 3, 2, 1), (1, 2), (1, 1), (0, 1), (1, 2), False),
    "2d-empty-window-aliases-in-span": (
        2,
        (2, 3, 3, 2),
        (2, 2),
        (1, 1),
        (1, 1),
        (3, 3),
        False,
    ),
    "2d-asymmetric-pairs": (
        2,
        (1, 2, 6, 7),
        (3, 2),
        (2, 1),
        ((0, 2), (1, 0)),
        (1, 1),
        False,
    ),
    "3d-asymmetric-ceil": (
        3,
        (1, 2, 5, 6, 5),
        (2, 3, 2),
        (2, 2, 2),
        ((1, 0), (0, 2), (1, 1)),
        (1, 1, 1),
        True,
    ),
}


def _pool_kwargs(kernel, stride, padding, dilation, ceil_mode):
    return dict(
        kernel_size=kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        ceil_mode=ceil_mode,
    )


# Every input kind, each in one of two dtypes (the 3-D grid in
# test_max_pool3d.py crosses all four dtypes with every kind).
DTYPE_KINDS = [
    ("float32", "random"),
    ("bfloat16", "ties"),
    ("float32", "nan"),
    ("bfloat16", "inf"),
]
assert {k for _, k in DTYPE_KINDS} == set(INPUT_KINDS)


def check_pool(nd, shape, args, rng, dtype, kind, **options):
    """A strided pool, ``args`` in the oracle's form, against the oracle on an
    input of ``kind`` (``options``: more keyword arguments of the ops)."""
    x = make_input(rng, shape, dtype, kind)
    kwargs = {**_pool_kwargs(*args), **options}
    check_against_oracle(
        lambda x: POOL[nd](x, **kwargs),
        lambda g, x, i, **kw: POOL_BWD[nd](g, x, i, **kwargs, **kw),
        x,
        reference.max_pool(x, *args),
        nd,
        rng,
        dtype,
    )


def check_adaptive(nd, shape, output_size, rng, dtype, kind, **options):
    """An adaptive pool against the oracle, as :func:`check_pool`."""
    x = make_input(rng, shape, dtype, kind)
    spatial = shape[len(shape) - nd :]
    full = (output_size,) * nd if isinstance(output_size, int) else output_size
    full = tuple(s if o is None else o for s, o in zip(spatial, full, strict=True))
    check_against_oracle(
        lambda x: ADAPTIVE[nd](x, output_size, **options),
        lambda g, x, i, **kw: ADAPTIVE_BWD[nd](g, x, i, **options, **kw),
        x,
        reference.adaptive_max_pool(x, full),
        nd,
        rng,
        dtype,
    )


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", POOL_CONFIGS)
def test_pool_matches_oracle_exactly(name, dtype, kind):
    nd, shape, *args = POOL_CONFIGS[name]
    check_pool(nd, shape, args, rng_for(name, dtype, kind), dtype, kind)


ADAPTIVE_CONFIGS = {
    "1d-non-integer": (1, (2, 3, 10), (4,)),
    "1d-upsample": (1, (3, 5), (7,)),
    "1d-one-element-upsample": (1, (2, 3, 1), (3,)),  # found by hypothesis
    "3d-non-integer": (3, (1, 2, 5, 7, 6), (3, 4, 4)),
    "3d-uniform-4d-input": (3, (2, 4, 6, 8), (2, 3, 4)),
}


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", ADAPTIVE_CONFIGS)
def test_adaptive_matches_oracle_exactly(name, dtype, kind):
    nd, shape, out = ADAPTIVE_CONFIGS[name]
    check_adaptive(nd, shape, out, rng_for(name, dtype, kind), dtype, kind)


# ------------------------------------------------------------ padding forms


@pytest.mark.parametrize(
    "shape, kernel, stride, dilation",
    [
        ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1)),
        ((2, 3, 8, 6), (2, 4), (3, 1), (1, 1)),
        ((1, 2, 9, 7), (3, 2), (1, 2), (2, 3)),
    ],
)
@pytest.mark.parametrize("padding", ["SAME", "VALID", "same"])
def test_string_padding_is_lax_reduce_window(shape, kernel, stride, dilation, padding):
    """Values equal ``lax.reduce_window`` max with the same padding string (what
    ``flax.linen.max_pool`` computes); indices equal the oracle's with the pads
    that ``lax.padtype_to_pads`` chooses."""
    x = make_input(rng_for(str(shape), padding), shape, "float32", "random")
    values, indices = jaxpool.max_pool2d_with_argmax(
        x, kernel, stride, padding, dilation
    )
    want = lax.reduce_window(
        jnp.asarray(x),
        -jnp.inf,
        lax.max,
        (1, 1, *kernel),
        (1, 1, *stride),
        padding.upper(),
        window_dilation=(1, 1, *dilation),
    )
    assert_same(values, want, "values")
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True)]
    pads = lax.padtype_to_pads(shape[2:], eff, stride, padding.upper())
    _, want_indices = reference.max_pool(
        x, kernel, stride, tuple(pads), dilation, False
    )
    assert_same(indices, want_indices, "indices")
    if padding.upper() == "SAME":
        assert values.shape[2:] == tuple(
            -(-n // s) for n, s in zip(shape[2:], stride, strict=True)
        )


def test_int_padding_is_a_symmetric_pair():
    x = make_input(rng_for("pairs"), (1, 2, 6, 7, 5), "float32", "ties")
    a = jaxpool.max_pool3d_with_argmax(x, 3, 2, (1, 0, 1))
    b = jaxpool.max_pool3d_with_argmax(x, 3, 2, ((1, 1), (0, 0), (1, 1)))
    for u, v in zip(a, b, strict=True):
        assert_same(u, v)


# ------------------------------------------------------------- channels last


def _moved(arr, nd):
    """Channels-first ``(..., C, *S)`` to channels-last ``(..., *S, C)``."""
    return jnp.moveaxis(arr, arr.ndim - nd - 1, -1)


LAYOUT_CASES = [
    (
        "pool3d",
        3,
        (2, 3, 6, 5, 7),
        lambda x, **kw: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, **kw),
    ),
    (
        "pool3d-4d",
        3,
        (3, 6, 5, 7),
        lambda x, **kw: jaxpool.max_pool3d_with_argmax(x, 2, **kw),
    ),
    (
        "pool2d-same",
        2,
        (2, 3, 9, 8),
        lambda x, **kw: jaxpool.max_pool2d_with_argmax(x, 3, 2, "SAME", **kw),
    ),
    (
        "pool1d",
        1,
        (2, 3, 9),
        lambda x, **kw: jaxpool.max_pool1d_with_argmax(x, 3, **kw),
    ),
    (
        "pool3d-big-kernel",
        3,
        (1, 2, 7, 6, 7),
        lambda x, **kw: jaxpool.max_pool3d_with_argmax(x, 4, 1, 2, **kw),
    ),
    (
        "adaptive1d",
        1,
        (2, 3, 10),
        lambda x, **kw: jaxpool.adaptive_max_pool1d(x, 4, **kw),
    ),
    (
        "adaptive2d",
        2,
        (2, 3, 11, 9),
        lambda x, **kw: jaxpool.adaptive_max_pool2d(x, (4, 3), **kw),
    ),
    (
        "adaptive3d",
        3,
        (1, 3, 5, 6, 7),
        lambda x, **kw: jaxpool.adaptive_max_pool3d(x, (2, 3, 3), **kw),
    ),
]


@pytest.mark.parametrize("algorithm", ["scatter", "gather"])
@pytest.mark.parametrize(
    "name, nd, shape, op", LAYOUT_CASES, ids=[case[0] for case in LAYOUT_CASES]
)
def test_channels_last_equals_channels_first(name, nd, shape, op, algorithm):
    """Values, indices and the gradient equal the channels-first ones up to
    moving the channel axis: indices stay plane offsets."""
    rng = rng_for(name, algorithm)
    x = jnp.asarray(make_input(rng, shape, "float32", "ties"))
    (values, indices), vjp = jax.vjp(lambda x: op(x, algorithm=algorithm), x)
    g = jnp.asarray(cotangent(rng, values.shape, "float32"))
    (grad,) = vjp((g, np.zeros(indices.shape, jax.dtypes.float0)))

    xl = _moved(x, nd)
    (lvalues, lindices), lvjp = jax.vjp(
        lambda x: op(x, channels_last=True, algorithm=algorithm), xl
    )
    (lgrad,) = lvjp((_moved(g, nd), np.zeros(lindices.shape, jax.dtypes.float0)))
    assert_same(lvalues, _moved(values, nd), "values")
    assert_same(lindices, _moved(indices, nd), "indices")
    assert_same(lgrad, _moved(grad, nd), "grad")


def test_channels_last_backward_ops_take_the_layout():
    """The standalone backward ops read and write the channels-last layout."""
    x = make_input(rng_for("bwd-layout"), (2, 3, 6, 6, 6), "float32", "random")
    xl = np.moveaxis(x, 1, -1)
    v, i = jaxpool.max_pool3d_with_argmax(x, 2)
    g = jaxpool.max_pool3d_with_argmax_backward(v + 1, x, i, 2)
    gl = jaxpool.max_pool3d_with_argmax_backward(
        _moved(v + 1, 3), xl, _moved(i, 3), 2, channels_last=True
    )
    assert_same(gl, _moved(g, 3))
    x2 = x[:, :, 0]
    v, i = jaxpool.adaptive_max_pool2d(x2, (4, 5))
    g = jaxpool.adaptive_max_pool2d_backward(v + 1, x2, i)
    gl = jaxpool.adaptive_max_pool2d_backward(
        _moved(v + 1, 2), _moved(x2, 2), _moved(i, 2), channels_last=True
    )
    assert_same(gl, _moved(g, 2))
