"""The TPU's kernel forms, run here on CPU, against the oracle.

On a TPU the platform seam emits forms of its own (``jaxpool._tpu``): the
forward as one variadic window reduction over the input and a code of each
element's position, the deterministic backward as per-tap selects placed by
stride phase. ``platform_forms("tpu")`` makes the seam emit those forms on
CPU: here the parts of those forms that the oracle grids and the sweeps
(``tests/test_oracle.py``, form ``tpu``) would not reach (each width of the
position codes, the order of the backward's sums, grad of grad);
``tests/test_tpu_programs.py`` checks that they are what a TPU gets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same, make_input, make_planes, platform_forms, rng_for

import jaxpool
from jaxpool import _tpu
from jaxpool._args import PoolArgs
from jaxpool._spec import pool_spec
from jaxpool._windows import AxisWindows

# Every test here runs with the TPU's forms (tests/conftest.py); the oracle
# grids and the sweeps run them as their ``tpu`` form (tests/test_oracle.py).
pytestmark = [pytest.mark.forms("tpu"), pytest.mark.full]


# The codes take the smallest integer type that names every position of a
# window (int8, int16), or flat int32 positions past 16 bits; each width must
# choose as the scan does.
CODE_WIDTHS = {
    "int4 (k2 s2: 2**3 tap codes)": ((1, 2, 7, 8, 9), (2, 2, 0)),
    "int4 (k2 s2 p1: 2**3 tap codes, padded)": ((1, 2, 7, 8, 9), (2, 2, 1)),
    "int8 (k3: 5**3 codes)": ((1, 2, 7, 8, 9), (3, 2, 1)),
    "int16 (k4: 7**3 codes)": ((1, 2, 9, 8, 9), (4, 2, 2)),
    "flat int32 (k17: 33**3 codes)": ((1, 2, 17, 18, 19), (17, 4, 8)),
}


@pytest.mark.parametrize("name", CODE_WIDTHS)
def test_every_code_width_chooses_as_the_scan(name):
    shape, args = CODE_WIDTHS[name]
    x = make_planes(rng_for("tpu-codes", name), shape, "float32")
    values, indices = jaxpool.max_pool3d_with_argmax(x, *args)  # the TPU form
    with platform_forms("cpu"):
        want = jaxpool.max_pool3d_with_argmax(x, *args)
    assert_same(values, want[0], "values")
    assert_same(indices, want[1], "indices")


def test_code_widths_are_the_ones_named():
    """The cases above reach each width: int4 (windows that tile the axis),
    int8, int16, flat int32 (``None``)."""
    widths = []
    for k, s in ((2, 2), (3, 2), (4, 2), (17, 4)):
        readings = [_tpu._reading(AxisWindows(19, 4, k, s, -(k // 2)))] * 3
        widths.append(_tpu._code_dtype(readings))
    assert widths == [jnp.int4, jnp.int8, jnp.int16, None]


# The dense backward runs in the arrays' own layout, or with the (n, c) planes
# moved to the minor axis where that pads a TPU's tiles less (_tpu.planes_minor).
ORDER_CASES = {
    "own layout, k3 s1 p1": ((2, 3, 9, 10, 11), (3, 1, 1), False),
    "planes minor, k3 s2 p1": ((4, 64, 7, 9, 10), (3, 2, 1), True),
    "planes minor, k2 s3 p1 (a phase no tap reads)": (
        (2, 80, 11, 7, 9),
        (2, 3, 1),
        True,
    ),
}


@pytest.mark.parametrize("name", ORDER_CASES)
def test_backward_order_is_the_gathers(name):
    """Non-integer gradients summed over overlapping windows: the TPU's dense
    backward adds each element's windows in the gather's order, so its bits
    are the gather's, not merely close; in either layout."""
    shape, args, moved = ORDER_CASES[name]
    x = make_input(rng_for("tpu-order", name), shape, "float32", "ties")
    values, indices = jaxpool.max_pool3d_with_argmax(x, *args)
    spec = pool_spec("t", 3, x.shape, PoolArgs(*args))
    assert _tpu.planes_minor(spec, indices.shape) == moved
    w = jnp.asarray(np.random.default_rng(5).standard_normal(values.shape), jnp.float32)

    def grad(x):
        loss = lambda x: jnp.sum(w * jaxpool.max_pool3d_with_argmax(x, *args)[0])  # noqa: E731
        return jax.grad(loss)(x)

    got = grad(x)
    with platform_forms("default"):
        gathered = grad(x)  # the accelerators' gather: overlapping windows
    assert_same(got, gathered)


@pytest.mark.parametrize(
    "shape, args",
    [((2, 3, 7, 8, 9), (3, 2, 1)), ((1, 2, 5, 6, 7), (2, 1, 1, 3))],  # d3: empty
    ids=["k3 s2 p1", "k2 s1 p1 d3"],
)
def test_grad_of_grad_is_the_scans(shape, args):
    """Grad of grad differentiates the forward itself, through the window
    reduction's own JVP rule (JAX's does not take the integer codes): the same
    second derivatives as the scan's."""
    x = make_input(rng_for("tpu-grad2", str(args)), shape, "float32", "random")
    c = make_input(rng_for("tpu-grad2-c", str(args)), shape, "float32", "random")

    def loss(x):
        values = jaxpool.max_pool3d_with_argmax(x, *args)[0]
        return jnp.sum(jnp.where(jnp.isinf(values), 0, values) ** 2)

    def second(x):
        return jax.grad(lambda x: jnp.sum(c * jax.grad(loss)(x)))(x)

    got = second(x)
    with platform_forms("cpu"):
        want = second(x)
    assert np.abs(np.asarray(want)).max() > 0  # the check can fail
    assert_same(got, want, "grad of grad")
