"""JAX transformations through the ops: jit, vmap, grad of grad, check_grads."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, assert_same, make_input, require
from jax.test_util import check_grads

import jaxpool

POOL = dict(kernel_size=3, stride=2, padding=1)  # overlapping windows


def pool(x, **kwargs):
    return jaxpool.max_pool3d_with_argmax(x, **(kwargs or POOL))


def tie_free(shape, seed=0, dtype=np.float64):
    """Distinct values at least 1/size apart, so a finite-difference step of
    1e-3 (relative to 0.1 spacing) never changes an argmax."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1).astype(dtype)


def test_jit_matches_eager():
    x = make_input(np.random.default_rng(0), (2, 3, 7, 6, 5), "float32", "nan")
    eager = pool(x)
    jitted = jax.jit(pool)(x)
    assert_same(jitted[0], eager[0]) and assert_same(jitted[1], eager[1])
    g = jnp.ones_like(eager[0])
    bwd = jax.jit(partial(jaxpool.max_pool3d_with_argmax_backward, **POOL))
    assert_same(
        bwd(g, x, eager[1]),
        jaxpool.max_pool3d_with_argmax_backward(g, x, eager[1], **POOL),
    )


def test_vmap_over_extra_leading_axis_equals_loop():
    x = make_input(np.random.default_rng(1), (3, 2, 2, 6, 5, 7), "float32", "ties")
    values, indices = jax.vmap(pool)(x)
    for b in range(3):
        vb, ib = pool(x[b])
        assert_same(values[b], vb) and assert_same(indices[b], ib)
    g = np.random.default_rng(2).standard_normal(values.shape).astype(np.float32)
    bwd = jax.vmap(
        lambda g, x, i: jaxpool.max_pool3d_with_argmax_backward(g, x, i, **POOL)
    )(g, x, indices)
    for b in range(3):
        want = jaxpool.max_pool3d_with_argmax_backward(g[b], x[b], indices[b], **POOL)
        assert_same(bwd[b], want)


def test_check_grads_order_2_float64():
    with jax.enable_x64(True):
        x = jnp.asarray(tie_free((1, 2, 5, 6, 5)))
        w = jnp.asarray(tie_free((1, 2, 3, 3, 3), seed=1))
        check_grads(
            lambda x: w * pool(x)[0] ** 2, (x,), order=2, modes=["rev"], eps=1e-3
        )
        check_grads(
            lambda g: jaxpool.max_pool3d_with_argmax_backward(g, x, pool(x)[1], **POOL),
            (w,),
            order=2,
            modes=["rev"],
        )


def test_grad_of_grad_matches_torch_double_backward():
    torch = require("torch")
    x = tie_free((2, 2, 5, 6, 5), dtype=np.float64) / 10
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, 2, 3, 3, 3))
    v = rng.standard_normal(x.shape)

    def loss(x, w):  # nonlinear in the pooled values: its Hessian is not zero
        return jnp.sum(w * pool(x)[0] ** 3)

    def outer(x, w):
        return jnp.sum(v * jax.grad(loss)(x, w))

    with jax.enable_x64(True):
        gx, gw = jax.grad(outer, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))

    xt = torch.from_numpy(x).requires_grad_()
    wt = torch.from_numpy(w).requires_grad_()
    yt, _ = torch.nn.functional.max_pool3d(xt, 3, 2, 1, return_indices=True)
    (gt,) = torch.autograd.grad((wt * yt**3).sum(), xt, create_graph=True)
    gxt, gwt = torch.autograd.grad((torch.from_numpy(v) * gt).sum(), (xt, wt))
    assert np.abs(gxt.numpy()).max() > 0  # a linear loss would give zero here
    assert_close(gx, gxt.numpy(), "float64", "d/dx")
    assert_close(gw, gwt.numpy(), "float64", "d/dw")


def test_traced_window_argument_raises_helpful_type_error():
    x = jnp.zeros((1, 1, 4, 4, 4))
    with pytest.raises(TypeError, match=r"`kernel_size`.*static"):
        jax.jit(jaxpool.max_pool3d_with_argmax)(x, 2)
    with pytest.raises(TypeError, match=r"`padding`.*static"):
        jax.jit(lambda x, p: jaxpool.max_pool3d_with_argmax(x, 2, padding=p))(x, 1)
    with pytest.raises(TypeError, match=r"`ceil_mode`.*static"):
        jax.jit(lambda x, c: jaxpool.max_pool3d_with_argmax(x, 2, ceil_mode=c))(x, True)
    # Closing over them or marking them static works.
    f = jax.jit(jaxpool.max_pool3d_with_argmax, static_argnums=1)
    assert f(x, 2)[0].shape == (1, 1, 2, 2, 2)
