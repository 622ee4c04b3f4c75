"""The whole family's argument forms: padding strings and pairs, and the
channels-last layouts, against ``lax.reduce_window``, the oracle and the
channels-first ops (the oracle grids are in tests/test_oracle.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same, cotangent, make_input, rng_for
from jax import lax

import jaxpool
from jaxpool import reference

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


@pytest.mark.forms("cpu")  # the numbers of the CPU's program in both layouts
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
