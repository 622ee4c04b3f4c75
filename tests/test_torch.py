"""PyTorch's CPU kernels as the second reference (torch==2.13.0)."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import DTYPES, TORCH_ADAPTIVE, TORCH_FRACTIONAL, TORCH_POOLS, TORCH_UNPOOLS
from helpers import (
    assert_same,
    compare_torch,
    cotangent,
    form_options,
    fractional_samples,
    from_torch,
    make_input,
    make_planes,
    np_dtype,
    precision,
    require,
    rng_for,
    row_dtypes,
    to_torch,
    torch_fractional_pool,
)

import jaxpool
from jaxpool import reference

# The CPU's forms alone: these tests check the CPU's numbers; the other
# platforms' forms are traced and run in their own tests (tests/conftest.py).
pytestmark = pytest.mark.forms("cpu")


@pytest.fixture(scope="module")
def torch():
    return require("torch")


def _seed(*parts: int) -> np.random.Generator:
    return np.random.default_rng(list(parts))


# The row's dtypes (helpers.row_dtypes); the Pallas kernels (interpreted) on a
# few rows, in float32.
def _grid(table, pallas):
    params = []
    for case in range(len(table)):
        for dtype, marks in row_dtypes(case):
            params.append(pytest.param(case, dtype, "cpu", marks=marks))
        if case in pallas:
            params.append(
                pytest.param(case, "float32", "pallas", marks=pytest.mark.full)
            )
    return params


GRIDS = {
    "TORCH_POOLS": (TORCH_POOLS, _grid(TORCH_POOLS, pallas=(0, 2, 5, 6))),
    "TORCH_ADAPTIVE": (TORCH_ADAPTIVE, _grid(TORCH_ADAPTIVE, pallas=(0, 2, 5))),
    # Fractional pools have no Pallas kernel.
    "TORCH_FRACTIONAL": (TORCH_FRACTIONAL, _grid(TORCH_FRACTIONAL, pallas=())),
}


@pytest.mark.parametrize("table", GRIDS)
def test_grids_meet_every_dtype_at_each_rank(table):
    """Rows take their wide dtypes in turn (``helpers.row_dtypes``): for each
    number of spatial axes the grid still compares every dtype with torch (a
    table reordered so that a rank's rows fall on one turn would lose one)."""
    rows, params = GRIDS[table]
    met = {}
    for param in params:
        case, dtype, form = param.values
        if form == "cpu":
            met.setdefault(rows[case][0], set()).add(dtype)
    for nd, dtypes in met.items():
        assert dtypes == set(DTYPES), (nd, dtypes)


@pytest.mark.parametrize("case, dtype, form", GRIDS["TORCH_POOLS"][1])
def test_max_pool_matches_torch(torch, case, dtype, form):
    nd, shape, kwargs = TORCH_POOLS[case]
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    backward = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    torch_pool = getattr(torch.nn.functional, f"max_pool{nd}d")
    options = form_options(form)
    rng = _seed(3, case, DTYPES.index(dtype))
    compare_torch(
        torch,
        lambda x: pool(x, **kwargs, **options),
        lambda xt: torch_pool(xt, **kwargs, return_indices=True),
        lambda g, x, i, **kw: backward(g, x, i, **kwargs, **options, **kw),
        make_planes(rng, shape, dtype),
        nd,
        rng,
        dtype,
    )


@pytest.mark.parametrize("case, dtype, form", GRIDS["TORCH_ADAPTIVE"][1])
def test_adaptive_max_pool_matches_torch(torch, case, dtype, form):
    nd, shape, output_size = TORCH_ADAPTIVE[case]
    pool = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    backward = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    torch_pool = getattr(torch.nn.functional, f"adaptive_max_pool{nd}d")
    options = form_options(form)
    rng = _seed(2, case, DTYPES.index(dtype))
    compare_torch(
        torch,
        lambda x: pool(x, output_size, **options),
        lambda xt: torch_pool(xt, output_size, return_indices=True),
        lambda g, x, i, **kw: backward(g, x, i, **options, **kw),
        make_planes(rng, shape, dtype),
        nd,
        rng,
        dtype,
    )


@pytest.mark.parametrize("case, dtype, form", GRIDS["TORCH_FRACTIONAL"][1])
def test_fractional_max_pool_matches_torch(torch, case, dtype, form):
    """Values, indices and the gradient (small-integer cotangents: exact in
    any order and dtype) equal PyTorch's, from the same samples; so does the
    deterministic backward of torch's indices."""
    del form  # the CPU's forms
    nd, shape, kernel, out = TORCH_FRACTIONAL[case]
    rng = rng_for("fractional-torch", case, dtype)
    x = make_planes(rng, shape, dtype)
    samples = fractional_samples(rng, x.shape, nd, dtype)
    xt = to_torch(torch, x).requires_grad_()
    tv, ti = torch_fractional_pool(torch, nd, xt, kernel, out, samples)
    g = cotangent(rng, tuple(tv.shape), dtype)
    tv.backward(to_torch(torch, g))
    pool = getattr(jaxpool, f"fractional_max_pool{nd}d")
    backward = getattr(jaxpool, f"fractional_max_pool{nd}d_backward")

    @jax.jit  # one program for the four results
    def run(x, g, torch_indices):
        forward = functools.partial(pool, kernel_size=kernel, output_size=out)
        (values, indices), vjp = jax.vjp(lambda x: forward(x, samples=samples), x)
        (grad,) = vjp((g, np.zeros(indices.shape, jax.dtypes.float0)))
        gather = backward(g, x, torch_indices, algorithm="gather")
        return values, indices, grad, gather

    with precision(dtype):
        values, indices, grad, gather = run(x, g, ti.numpy())
    assert_same(values, from_torch(torch, tv), "values")
    assert_same(indices, ti.numpy().astype(np.int32), "indices")
    assert_same(grad, from_torch(torch, xt.grad), "grad")
    assert_same(gather, from_torch(torch, xt.grad), "gather backward from torch")


def test_fractional_nan_rule_and_ties_are_torchs(torch):
    x = np.array([[[[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, 0.0]]]], np.float32)
    samples = np.full((1, 1, 2), 0.3, np.float32)
    got = jaxpool.fractional_max_pool2d(x, (2, 4), 1, samples=samples)
    assert np.isnan(got[0]).all() and got[1].ravel().tolist() == [3]  # last NaN
    x[0, 0, 0, [1, 3]] = 5.0
    got = jaxpool.fractional_max_pool2d(x, (2, 4), 1, samples=samples)
    assert got[1].ravel().tolist() == [1]  # first maximum
    want = torch_fractional_pool(torch, 2, to_torch(torch, x), (2, 4), 1, samples)
    assert got[1].ravel().tolist() == want[1].ravel().tolist()


# name: (the op, its keyword arguments, torch's and jaxpool's alike).
NEGATIVE_ZERO_POOLS = {
    "max_pool2d k3 s2 p1": ("max_pool2d", dict(kernel_size=3, stride=2, padding=1)),
    "max_pool2d k2": ("max_pool2d", dict(kernel_size=2)),
    "adaptive_max_pool2d 9x10 -> 4x3": (
        "adaptive_max_pool2d",
        dict(output_size=(4, 3)),
    ),
}


@pytest.mark.parametrize("algorithm", ["scatter", "gather"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("pool", NEGATIVE_ZERO_POOLS)
def test_negative_zero_gradients_add_as_torch_adds_them(torch, pool, dtype, algorithm):
    """Cotangents of -0.0 (and some nonzero ones) give torch's gradient bit for
    bit, zeros by their sign: +0.0 wherever only -0.0 lands, in the scatter
    and in the deterministic sum, through ``jax.vjp`` and the backward op."""
    op, kwargs = NEGATIVE_ZERO_POOLS[pool]
    adaptive = op.startswith("adaptive")
    name = op if adaptive else f"{op}_with_argmax"
    forward = functools.partial(getattr(jaxpool, name), **kwargs)
    # (an adaptive backward takes its windows from the shapes alone)
    backward = getattr(jaxpool, f"{name}_backward")
    backward = backward if adaptive else functools.partial(backward, **kwargs)
    x = make_input(_seed(21), (2, 3, 9, 10), dtype, "random")
    xt = to_torch(torch, x).requires_grad_()
    tv, ti = getattr(torch.nn.functional, op)(xt, **kwargs, return_indices=True)
    g = np.full(tv.shape, -0.0, np_dtype(dtype))
    g.reshape(-1)[::7] = 2.0  # a few windows carry a gradient
    tv.backward(to_torch(torch, g))
    want = from_torch(torch, xt.grad)
    assert np.signbit(want[want == 0]).sum() == 0  # torch's zeros are +0.0
    _, vjp = jax.vjp(lambda x: forward(x, algorithm=algorithm)[0], x)
    assert_same(vjp(g)[0], want, "grad")
    indices = forward(x)[1]
    assert_same(indices, ti.numpy().astype(np.int32), "indices")
    assert_same(backward(g, x, indices, algorithm=algorithm), want, "backward op")


def _unpool_inputs(torch, nd, shape, kwargs, dtype, kind):
    """Pooled values and indices (jaxpool's, equal to torch's), both ways."""
    rng = _seed(14, TORCH_UNPOOLS.index((nd, shape, kwargs)), DTYPES.index(dtype))
    x = make_input(rng, shape, dtype, kind)
    with precision(dtype):
        values, indices = getattr(jaxpool, f"max_pool{nd}d_with_argmax")(x, **kwargs)
    values = np.asarray(values)
    indices_t = torch.from_numpy(np.asarray(indices, np.int64))
    return x, values, indices, to_torch(torch, values), indices_t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(TORCH_UNPOOLS)))
def test_max_unpool_matches_torch(torch, case, dtype):
    """Values and gradients equal torch's for the default size, the spatial
    size and the whole shape (``output_size=x.size()``, PyTorch's idiom), in
    every dtype, NaN included."""
    nd, shape, kwargs = TORCH_UNPOOLS[case]
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


@pytest.mark.parametrize("case", range(len(TORCH_UNPOOLS)))
def test_max_unpool_output_size_check_matches_torch(torch, case):
    """Every output size around the default, one axis at a time: jaxpool
    rejects exactly the sizes torch rejects, with torch's bounds in the
    message, and where both accept, the results are equal (where torch then
    finds an index outside the smaller plane and raises, jaxpool drops it, as
    the oracle does)."""
    nd, shape, kwargs = TORCH_UNPOOLS[case]
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
