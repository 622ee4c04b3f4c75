"""The accelerators' kernel forms, run here on CPU, against the oracle.

On a GPU or TPU the platform seam emits other forms than on CPU: the values
carried through the scan (no read-back gather), the padding folded into each
tap, the scatter batched over the non-spatial axes. ``platform_forms("default")``
makes the seam emit those forms on CPU, so the oracle grids of every op family
check them bit for bit here (``tests/test_export.py`` checks that they are what
the accelerators get).
"""

from __future__ import annotations

import pytest
import test_adaptive as adaptive_grid
import test_family as family_grid
import test_max_pool3d as pool3d_grid
from helpers import platform_forms, rng_for
from hypothesis import given, settings
from test_properties import (
    adaptive_cases,
    check_adaptive_case,
    check_pool_case,
    pool_cases,
)

DTYPE_KINDS = family_grid.DTYPE_KINDS


@pytest.fixture(autouse=True, scope="module")
def accelerator_forms():
    with platform_forms("default"):
        yield


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", pool3d_grid.CONFIGS)
def test_max_pool3d(name, dtype, kind):
    rng = rng_for("accelerator", name, dtype, kind)
    pool3d_grid.check_config(name, rng, dtype, kind)


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", family_grid.POOL_CONFIGS)
def test_max_pool_family(name, dtype, kind):
    nd, shape, *args = family_grid.POOL_CONFIGS[name]
    rng = rng_for("accelerator", name, dtype, kind)
    family_grid.check_pool(nd, shape, args, rng, dtype, kind)


ADAPTIVE = {
    **{name: (2, *rest[:2]) for name, rest in adaptive_grid.CONFIGS.items()},
    **family_grid.ADAPTIVE_CONFIGS,
}


@pytest.mark.parametrize("dtype, kind", DTYPE_KINDS)
@pytest.mark.parametrize("name", ADAPTIVE)
def test_adaptive_family(name, dtype, kind):
    nd, shape, output_size = ADAPTIVE[name]
    rng = rng_for("accelerator", name, dtype, kind)
    family_grid.check_adaptive(nd, shape, output_size, rng, dtype, kind)


@settings(max_examples=50)
@given(pool_cases())
def test_max_pool_sweep(case):
    check_pool_case(case)


@settings(max_examples=50)
@given(adaptive_cases())
def test_adaptive_sweep(case):
    check_adaptive_case(case)
