"""The accelerators' kernel forms, run here on CPU, against the oracle.

On a GPU or TPU the platform seam emits other forms than on CPU: the values
carried through the scan (no read-back gather), the padding folded into each
tap, the scatter batched over the non-spatial axes. ``platform_forms("default")``
makes the seam emit those forms on CPU, so the oracle grids of every op family
check them bit for bit here (``tests/test_export.py`` checks that they are what
the accelerators get).
"""

from __future__ import annotations

import numpy as np
import pytest
import test_adaptive as adaptive_grid
import test_family as family_grid
import test_max_pool3d as pool3d_grid
from helpers import check_against_oracle, make_input, platform_forms, rng_for
from hypothesis import given, settings
from test_properties import _check, adaptive_cases, pool_cases

import jaxpool
from jaxpool import reference

DTYPE_KINDS = family_grid.DTYPE_KINDS


@pytest.fixture(autouse=True, scope="module")
def accelerator_forms():
    with platform_forms("default"):
        yield


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", pool3d_grid.CONFIGS)
def test_max_pool3d(name, dtype, kind):
    shape, kwargs = pool3d_grid.CONFIGS[name]
    rng = rng_for("accelerator", name, dtype, kind)
    x = make_input(rng, shape, dtype, kind)
    check_against_oracle(
        lambda x: jaxpool.max_pool3d_with_argmax(x, **kwargs),
        lambda g, x, i, **kw: jaxpool.max_pool3d_with_argmax_backward(
            g, x, i, **kwargs, **kw
        ),
        x,
        pool3d_grid.oracle(x, **kwargs),
        3,
        rng,
        dtype,
    )


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", family_grid.POOL_CONFIGS)
def test_max_pool_family(name, dtype, kind):
    nd, shape, *args = family_grid.POOL_CONFIGS[name]
    rng = rng_for("accelerator", name, dtype, kind)
    x = make_input(rng, shape, dtype, kind)
    kwargs = family_grid._pool_kwargs(*args)
    check_against_oracle(
        lambda x: family_grid.POOL[nd](x, **kwargs),
        lambda g, x, i, **kw: family_grid.POOL_BWD[nd](g, x, i, **kwargs, **kw),
        x,
        reference.max_pool(x, *args),
        nd,
        rng,
        dtype,
    )


ADAPTIVE = {
    **{name: (2, *rest[:2]) for name, rest in adaptive_grid.CONFIGS.items()},
    **family_grid.ADAPTIVE_CONFIGS,
}


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", ADAPTIVE)
def test_adaptive_family(name, dtype, kind):
    nd, shape, output_size = ADAPTIVE[name]
    rng = rng_for("accelerator", name, dtype, kind)
    x = make_input(rng, shape, dtype, kind)
    spatial = shape[len(shape) - nd :]
    full = (output_size,) * nd if isinstance(output_size, int) else output_size
    full = tuple(s if o is None else o for s, o in zip(spatial, full, strict=True))
    check_against_oracle(
        lambda x: family_grid.ADAPTIVE[nd](x, output_size),
        lambda g, x, i, **kw: family_grid.ADAPTIVE_BWD[nd](g, x, i, **kw),
        x,
        reference.adaptive_max_pool(x, full),
        nd,
        rng,
        dtype,
    )


@settings(max_examples=50)
@given(pool_cases())
def test_max_pool_sweep(case):
    nd = case["nd"]
    args = [case[k] for k in ("kernel", "stride", "padding", "dilation")]
    args.append(case["ceil_mode"])
    kw = dict(channels_last=case["channels_last"])
    fwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    x = make_input(
        np.random.default_rng(case["seed"]),
        case["shape"],
        case["dtype"],
        case["kind"],
    )
    _check(
        case,
        lambda x: fwd(x, *args, **kw),
        lambda g, x, i, **k: bwd(g, x, i, *args, **kw, **k),
        reference.max_pool(x, *args),
    )


@settings(max_examples=50)
@given(adaptive_cases())
def test_adaptive_sweep(case):
    nd, out = case["nd"], case["output_size"]
    kw = dict(channels_last=case["channels_last"])
    fwd = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    bwd = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    spatial = case["shape"][-nd:]
    full = tuple(s if o is None else o for s, o in zip(spatial, out, strict=True))
    x = make_input(
        np.random.default_rng(case["seed"]),
        case["shape"],
        case["dtype"],
        case["kind"],
    )
    _check(
        case,
        lambda x: fwd(x, out, **kw),
        lambda g, x, i, **k: bwd(g, x, i, **kw, **k),
        reference.adaptive_max_pool(x, full),
    )
