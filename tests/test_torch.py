"""PyTorch's CPU kernels as the second reference (torch==2.13.0)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DTYPES,
    INPUT_KINDS,
    assert_close,
    assert_same,
    from_torch,
    make_input,
    np_dtype,
    precision,
    require,
    to_torch,
)

import jaxpool
from jaxpool import reference


@pytest.fixture(scope="module")
def torch():
    return require("torch")


POOL3D = [
    ((2, 3, 6, 7, 8), dict(kernel_size=2)),
    ((2, 2, 7, 6, 5), dict(kernel_size=(3, 2, 2), stride=(2, 1, 3), padding=(1, 1, 0))),
    ((1, 3, 6, 7, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((1, 2, 5, 5, 5), dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
    ((1, 2, 5, 6, 7), dict(kernel_size=3, stride=1, padding=1)),
    (
        (1, 2, 7, 6, 8),
        dict(kernel_size=(2, 3, 2), stride=1, padding=1, dilation=(2, 1, 3)),
    ),
    # A window with no in-bounds tap (index 14 in a 2x2x2 plane); see below.
    ((1, 2, 2, 2, 2), dict(kernel_size=2, stride=1, padding=1, dilation=3)),
    ((3, 6, 5, 6), dict(kernel_size=2, stride=3)),
]


def torch_pool3d(
    torch, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False
):
    return torch.nn.functional.max_pool3d(
        x, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True
    )


def compare(torch, forward, torch_forward, backward, x, nd, rng, dtype):
    """Values and indices identical to torch's; gradients within rounding.

    ``forward(x)`` and ``backward(g, x, indices)`` are jaxpool's,
    ``torch_forward(xt)`` torch's ``(values, indices)``.
    """
    xt = to_torch(torch, x).requires_grad_()
    tv, ti = torch_forward(xt)
    g = rng.standard_normal(tv.shape).astype(np_dtype(dtype))
    # torch's CPU backward does not bounds-check: an out-of-plane index writes
    # into the next plane (or past the buffer). We drop it (docs/semantics.md),
    # so compare such gradients with the oracle only, and never run torch's
    # backward there.
    spatial = x.shape[x.ndim - nd :]
    in_plane = bool((ti < np.prod(spatial)).all())
    if in_plane:
        tv.backward(to_torch(torch, g))
    with precision(dtype):
        (values, indices), vjp = jax.vjp(forward, jnp.asarray(x))
        (grad,) = vjp((jnp.asarray(g), np.zeros(indices.shape, jax.dtypes.float0)))
        # Indices straight from torch (int64) drive our backward to the same place.
        standalone = backward(g, x, ti.numpy())
    assert_same(values, from_torch(torch, tv), "values")
    assert_same(indices, ti.numpy().astype(np.int32), "indices")
    assert_same(standalone, grad, "backward from torch's indices")
    if in_plane and dtype in ("float32", "float64"):
        assert_close(grad, from_torch(torch, xt.grad), dtype, "grad vs torch")
    else:
        # torch's 16-bit CPU backward accumulates in 16 bits; compare with a
        # float64 scatter of the same indices instead, within one rounding.
        exact = reference.scatter_add(g, ti.numpy(), spatial)
        assert_close(grad, exact, dtype, "grad vs float64 scatter")


def _seed(*parts: int) -> np.random.Generator:
    return np.random.default_rng(list(parts))


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(POOL3D)))
def test_max_pool3d_matches_torch(torch, case, dtype, kind):
    shape, kwargs = POOL3D[case]
    rng = _seed(3, case, DTYPES.index(dtype), INPUT_KINDS.index(kind))
    compare(
        torch,
        lambda x: jaxpool.max_pool3d_with_argmax(x, **kwargs),
        lambda xt: torch_pool3d(torch, xt, **kwargs),
        lambda g, x, i: jaxpool.max_pool3d_with_argmax_backward(g, x, i, **kwargs),
        make_input(rng, shape, dtype, kind),
        3,
        rng,
        dtype,
    )


ADAPTIVE = [
    ((2, 3, 10, 9), (3, 4)),
    ((2, 2, 8, 8), (4, 2)),
    ((1, 2, 5, 7), (8, 11)),
    ((2, 2, 6, 7), (None, 3)),
    ((3, 7, 9), 4),
    ((1, 2, 50, 50), 7),
]


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(ADAPTIVE)))
def test_adaptive_max_pool2d_matches_torch(torch, case, dtype, kind):
    shape, output_size = ADAPTIVE[case]
    rng = _seed(2, case, DTYPES.index(dtype), INPUT_KINDS.index(kind))
    compare(
        torch,
        lambda x: jaxpool.adaptive_max_pool2d(x, output_size),
        lambda xt: torch.nn.functional.adaptive_max_pool2d(
            xt, output_size, return_indices=True
        ),
        jaxpool.adaptive_max_pool2d_backward,
        make_input(rng, shape, dtype, kind),
        2,
        rng,
        dtype,
    )


# The rest of the family: (nd, shape, kwargs) for torch's max_pool{1,2}d and
# (nd, shape, output_size) for adaptive_max_pool{1,3}d.
POOL_FAMILY = [
    (1, (2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (1, (3, 9), dict(kernel_size=2, dilation=2)),
    (2, (2, 3, 7, 8), dict(kernel_size=2)),
    (2, (1, 2, 9, 7), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1))),
    (2, (2, 5, 6), dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True)),
    (2, (2, 3, 2, 1), dict(kernel_size=(1, 2), padding=(0, 1), dilation=(1, 2))),
]
ADAPTIVE_FAMILY = [
    (1, (2, 3, 10), 4),
    (1, (3, 5), 8),
    (3, (1, 2, 5, 7, 6), (3, 4, None)),
    (3, (2, 6, 6, 9), 3),
]


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", range(len(POOL_FAMILY)))
def test_max_pool1d_2d_match_torch(torch, case, dtype, kind):
    nd, shape, kwargs = POOL_FAMILY[case]
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    backward = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    torch_pool = getattr(torch.nn.functional, f"max_pool{nd}d")
    rng = _seed(12, case, DTYPES.index(dtype), INPUT_KINDS.index(kind))
    compare(
        torch,
        lambda x: pool(x, **kwargs),
        lambda xt: torch_pool(xt, **kwargs, return_indices=True),
        lambda g, x, i: backward(g, x, i, **kwargs),
        make_input(rng, shape, dtype, kind),
        nd,
        rng,
        dtype,
    )


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", range(len(ADAPTIVE_FAMILY)))
def test_adaptive_max_pool1d_3d_match_torch(torch, case, dtype, kind):
    nd, shape, output_size = ADAPTIVE_FAMILY[case]
    pool = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    torch_pool = getattr(torch.nn.functional, f"adaptive_max_pool{nd}d")
    rng = _seed(13, case, DTYPES.index(dtype), INPUT_KINDS.index(kind))
    compare(
        torch,
        lambda x: pool(x, output_size),
        lambda xt: torch_pool(xt, output_size, return_indices=True),
        getattr(jaxpool, f"adaptive_max_pool{nd}d_backward"),
        make_input(rng, shape, dtype, kind),
        nd,
        rng,
        dtype,
    )


# max_unpool{1,2,3}d called as PyTorch calls it: (nd, pool input shape, the
# pool's window arguments, which the unpool takes too), each restored to its
# shape by PyTorch's default size. The last is unbatched.
UNPOOL_FAMILY = [
    (1, (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
    (2, (2, 3, 7, 8), dict(kernel_size=2)),
    (2, (1, 2, 9, 7), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1))),
    (3, (1, 2, 6, 4, 6), dict(kernel_size=2, stride=2, padding=1)),
    (3, (2, 7, 7, 5), dict(kernel_size=3, stride=(2, 1, 2), padding=1)),
]


def _unpool_inputs(torch, nd, shape, kwargs, dtype, kind):
    """Pooled values and indices (jaxpool's, equal to torch's), both ways."""
    rng = _seed(14, UNPOOL_FAMILY.index((nd, shape, kwargs)), DTYPES.index(dtype))
    x = make_input(rng, shape, dtype, kind)
    with precision(dtype):
        values, indices = getattr(jaxpool, f"max_pool{nd}d_with_argmax")(x, **kwargs)
    values = np.asarray(values)
    indices_t = torch.from_numpy(np.asarray(indices, np.int64))
    return x, values, indices, to_torch(torch, values), indices_t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(UNPOOL_FAMILY)))
def test_max_unpool_matches_torch(torch, case, dtype):
    """Values and gradients equal torch's for the default size, the spatial
    size and the whole shape (``output_size=x.size()``, PyTorch's idiom), in
    every dtype, NaN included."""
    nd, shape, kwargs = UNPOOL_FAMILY[case]
    _, values, indices, vt, it = _unpool_inputs(torch, nd, shape, kwargs, dtype, "nan")
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    torch_unpool = getattr(torch.nn.functional, f"max_unpool{nd}d")
    window = (kwargs["kernel_size"], kwargs.get("stride"), kwargs.get("padding", 0))
    for output_size in (None, shape[-nd:], shape):
        # torch takes a whole shape of a batch only: (C, *S) is jaxpool's form.
        unbatched = output_size is not None and len(output_size) == nd + 1
        torch_size = output_size[1:] if unbatched else output_size
        vt_grad = vt.clone().requires_grad_()
        want = torch_unpool(vt_grad, it, *window, output_size=torch_size)
        ct = _seed(15, case).integers(-3, 4, want.shape).astype(np_dtype(dtype))
        want.backward(to_torch(torch, ct))
        with precision(dtype):
            out, vjp = jax.vjp(
                lambda v, o=output_size: unpool(v, indices, *window, output_size=o),
                jnp.asarray(values),
            )
            (grad,) = vjp(jnp.asarray(ct))
        assert_same(out, from_torch(torch, want), f"values, {output_size=}")
        assert_same(grad, from_torch(torch, vt_grad.grad), f"grad, {output_size=}")


@pytest.mark.parametrize("case", range(len(UNPOOL_FAMILY)))
def test_max_unpool_output_size_check_matches_torch(torch, case):
    """Every output size around the default, one axis at a time: jaxpool
    rejects exactly the sizes torch rejects, with torch's bounds in the
    message, and where both accept, the results are equal (where torch then
    finds an index outside the smaller plane and raises, jaxpool drops it, as
    the oracle does)."""
    nd, shape, kwargs = UNPOOL_FAMILY[case]
    _, values, indices, vt, it = _unpool_inputs(
        torch, nd, shape, kwargs, "float32", "random"
    )
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    torch_unpool = getattr(torch.nn.functional, f"max_unpool{nd}d")
    window = (kwargs["kernel_size"], kwargs.get("stride"), kwargs.get("padding", 0))
    default = tuple(torch_unpool(vt, it, *window).shape[-nd:])
    bounds = re.compile(r"dim \d+ must be between -?\d+ and -?\d+")
    accepted = rejected = 0
    for axis in range(nd):
        stride = np.broadcast_to(kwargs.get("stride") or kwargs["kernel_size"], nd)
        for size in range(1, default[axis] + stride[axis] + 2):
            output_size = (*default[:axis], size, *default[axis + 1 :])
            try:
                want = from_torch(
                    torch, torch_unpool(vt, it, *window, output_size=output_size)
                )
            except ValueError as e:
                with pytest.raises(ValueError) as ours:
                    unpool(values, indices, *window, output_size=output_size)
                assert bounds.findall(str(ours.value)) == bounds.findall(str(e))
                rejected += 1
                continue
            except RuntimeError as e:  # an index outside the smaller plane
                assert "invalid max index" in str(e)
                want = reference.max_unpool(values, np.asarray(indices), output_size)
            got = unpool(values, indices, *window, output_size=output_size)
            assert_same(got, want, f"{output_size=}")
            accepted += 1
    assert accepted >= nd and rejected >= nd  # both sides of the range were tried
