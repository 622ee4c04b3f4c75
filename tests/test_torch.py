"""PyTorch's CPU kernels as the second reference (torch==2.13.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DTYPES,
    INPUT_KINDS,
    assert_close,
    assert_same,
    make_input,
    np_dtype,
    precision,
    require,
)

import jaxpool
from jaxpool import reference


@pytest.fixture(scope="module")
def torch():
    return require("torch")


def to_torch(torch, x: np.ndarray):
    if x.dtype == np_dtype("bfloat16"):
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def from_torch(torch, t) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(np_dtype("bfloat16"))
    return t.numpy()


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


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(POOL3D)))
def test_max_pool3d_matches_torch(torch, case, dtype, kind):
    shape, kwargs = POOL3D[case]
    rng = np.random.default_rng(
        case * 100 + DTYPES.index(dtype) * 10 + INPUT_KINDS.index(kind)
    )
    x = make_input(rng, shape, dtype, kind)
    xt = to_torch(torch, x).requires_grad_()
    tv, ti = torch_pool3d(torch, xt, **kwargs)
    g = rng.standard_normal(tv.shape).astype(np_dtype(dtype))
    # torch's CPU backward does not bounds-check: an out-of-plane index writes
    # into the next plane (or past the buffer). We drop it (SPEC.md), so compare
    # such gradients with the oracle only, and never run torch's backward there.
    in_plane = bool((ti < np.prod(shape[-3:])).all())
    if in_plane:
        tv.backward(to_torch(torch, g))
    with precision(dtype):
        (values, indices), vjp = jax.vjp(
            lambda x: jaxpool.max_pool3d_with_argmax(x, **kwargs), jnp.asarray(x)
        )
        (grad,) = vjp((jnp.asarray(g), np.zeros(indices.shape, jax.dtypes.float0)))
        # Indices straight from torch (int64) drive our backward to the same place.
        standalone = jaxpool.max_pool3d_with_argmax_backward(g, x, ti.numpy(), **kwargs)
    assert_same(values, from_torch(torch, tv), "values")
    assert_same(indices, ti.numpy().astype(np.int32), "indices")
    assert_same(standalone, grad, "backward from torch's indices")
    if in_plane and dtype in ("float32", "float64"):
        assert_close(grad, from_torch(torch, xt.grad), dtype, "grad vs torch")
    else:
        # torch's 16-bit CPU backward accumulates in 16 bits; compare with a
        # float64 scatter of the same indices instead, within one rounding.
        exact = reference.scatter_add(g, ti.numpy(), shape[-3:])
        assert_close(grad, exact, dtype, "grad vs float64 scatter")
