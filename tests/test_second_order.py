"""Second order through every public op, and the forward-mode table of
docs/transformations.md, row by row.

The ops are ``jax.custom_vjp`` functions whose forward rules call kernels and
whose backward rules are plain JAX, so ``jax.hessian`` (``jacfwd`` of
``jacrev``) and Hessian-vector products (forward over reverse) differentiate
the backward rules with ``jvp``. Each must equal reverse over reverse
(``jacrev`` of ``jacrev``) exactly: the inputs are distinct small integers in
float64 (no argmax moves, every product and sum exact).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, assert_same

import jaxpool

CUSTOM_VJP = "can't apply forward-mode autodiff (jvp) to a custom_vjp function."


def distinct(shape, seed=0) -> np.ndarray:
    """Distinct small integers in float64: no tie, so no argmax moves."""
    rng = np.random.default_rng(seed)
    return rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float64)


def small_ints(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float64)


def _pool(nd, *window, **kw):
    return lambda x: getattr(jaxpool, f"max_pool{nd}d_with_argmax")(x, *window, **kw)


def _adaptive(nd, size, **kw):
    return lambda x: getattr(jaxpool, f"adaptive_max_pool{nd}d")(x, size, **kw)


class Case(NamedTuple):
    shape: tuple[int, ...]  # of the argument
    fn: Any  # argument -> array


def _family(nd: int) -> dict[str, Any]:
    """Every public op of ``nd`` spatial axes as a function of its
    differentiable argument: the pools and adaptive pools of ``x``, the unpool
    of the pooled values, pool then unpool of ``x``, the backward ops of
    ``grad_output``. Each is built when a test asks (under x64), so the
    indices it closes over are computed then, not at collection."""
    shape = (1, 2, *(3, 4, 5)[3 - nd :])
    spatial = shape[2:]
    overlapping, disjoint = _pool(nd, 3, 1, 1), _pool(nd, 2)  # overlapping: same size
    adaptive = _adaptive(nd, 2 if nd == 3 else 3)
    adaptive_shape = (1, 2, *(2 if nd == 3 else 3,) * nd)
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    pool_bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    adaptive_bwd = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")

    def argmax(pool: Any) -> tuple[jax.Array, jax.Array]:
        x = jnp.asarray(distinct(shape, seed=nd))
        return x, pool(x)[1]

    def unpool_case() -> Case:
        _, indices = argmax(overlapping)
        return Case(shape, lambda v: unpool(v, indices, 3, 1, 1, spatial))

    def pool_bwd_case() -> Case:
        x, indices = argmax(overlapping)
        return Case(shape, lambda g: pool_bwd(g, x, indices, 3, 1, 1))

    def adaptive_bwd_case() -> Case:
        x, indices = argmax(adaptive)
        return Case(adaptive_shape, lambda g: adaptive_bwd(g, x, indices))

    return {
        f"max_pool{nd}d-overlapping": lambda: Case(shape, lambda x: overlapping(x)[0]),
        f"max_pool{nd}d-disjoint": lambda: Case(shape, lambda x: disjoint(x)[0]),
        f"adaptive_max_pool{nd}d": lambda: Case(shape, lambda x: adaptive(x)[0]),
        f"max_unpool{nd}d": unpool_case,
        f"max_pool{nd}d-then-unpool": lambda: Case(
            shape, lambda x: unpool(*disjoint(x), 2, output_size=spatial)
        ),
        f"max_pool{nd}d_with_argmax_backward": pool_bwd_case,
        f"adaptive_max_pool{nd}d_backward": adaptive_bwd_case,
    }


def _variant(**kw: str) -> dict[str, Any]:
    """A backward algorithm, or the Pallas kernels (interpreted on CPU), in
    2-D: the pool, the adaptive pool and the pool's backward op."""
    tag = "-".join(kw.values())
    shape = (1, 2, 4, 5)
    pool, adaptive = _pool(2, 3, 1, 1, **kw), _adaptive(2, 3, **kw)
    bwd_kw = dict(algorithm="gather", **kw) if "implementation" in kw else kw

    def backward_case() -> Case:
        x = jnp.asarray(distinct(shape, seed=7))
        indices = pool(x)[1]
        return Case(
            shape,
            lambda g: jaxpool.max_pool2d_with_argmax_backward(
                g, x, indices, 3, 1, 1, **bwd_kw
            ),
        )

    return {
        f"max_pool2d-{tag}": lambda: Case(shape, lambda x: pool(x)[0]),
        f"adaptive_max_pool2d-{tag}": lambda: Case(shape, lambda x: adaptive(x)[0]),
        f"max_pool2d_with_argmax_backward-{tag}": backward_case,
    }


def _fractional(nd: int, algorithm: str) -> dict[str, Any]:
    """Fractional max pooling with fixed samples (its windows), and its
    backward op."""
    shape = (1, 2, *(5, 6, 7)[3 - nd :])
    samples = np.linspace(0.1, 0.9, 2 * nd).reshape(1, 2, nd)
    pool_fn = getattr(jaxpool, f"fractional_max_pool{nd}d")
    bwd = getattr(jaxpool, f"fractional_max_pool{nd}d_backward")
    out = (3,) * nd

    def pool(x):
        u = jnp.asarray(samples, x.dtype)
        return pool_fn(x, 2, out, samples=u, algorithm=algorithm)

    def backward_case() -> Case:
        x = jnp.asarray(distinct(shape, seed=11))
        indices = pool(x)[1]
        return Case((1, 2, *out), lambda g: bwd(g, x, indices, algorithm=algorithm))

    return {
        f"fractional_max_pool{nd}d-{algorithm}": lambda: Case(
            shape, lambda x: pool(x)[0]
        ),
        f"fractional_max_pool{nd}d_backward-{algorithm}": backward_case,
    }


CASES = {
    **_fractional(2, "scatter"),
    **_fractional(2, "gather"),
    **_fractional(3, "auto"),
    **_family(1),
    **_family(2),
    **_family(3),
    **_variant(algorithm="scatter"),
    **_variant(algorithm="gather"),
    **_variant(implementation="pallas"),
}


def _tiered(names):
    """The Pallas kernels (interpreted: slow) in the full tier."""
    full = pytest.mark.full
    return [pytest.param(n, marks=full if "pallas" in n else ()) for n in names]


FORWARD_OPS = _tiered(name for name in CASES if "backward" not in name)
BACKWARD_OPS = _tiered(name for name in CASES if "backward" in name)


def _loss(case: Case, w: jax.Array):
    """Cubic in the op's output: its Hessian is not zero."""
    return lambda a: jnp.sum(w * case.fn(a) ** 3)


@pytest.mark.parametrize("name", _tiered(CASES))
def test_hessian_and_hvp_equal_reverse_over_reverse(name):
    with jax.enable_x64(True):
        case = CASES[name]()
        a = jnp.asarray(distinct(case.shape, seed=11))
        w = jnp.asarray(small_ints(jax.eval_shape(case.fn, a).shape, seed=12))
        v = jnp.asarray(small_ints(case.shape, seed=13))
        loss = _loss(case, w)

        @jax.jit  # one compile, not one per primitive of an eager trace
        def second_order(a, v):
            return (
                jax.jacrev(jax.jacrev(loss))(a),
                jax.hessian(loss)(a),
                jax.jvp(jax.grad(loss), (a,), (v,))[1],
                jax.linearize(jax.grad(loss), a)[1](v),
            )

        want, hessian, hvp, hvp_linearized = second_order(a, v)
    assert np.abs(np.asarray(want)).max() > 0
    assert_same(hessian, want, "jax.hessian", signed_zeros=False)
    want_hvp = np.tensordot(np.asarray(want), np.asarray(v), axes=a.ndim)
    assert_same(hvp, want_hvp, "jvp of grad", signed_zeros=False)
    assert_same(hvp_linearized, want_hvp, "linearize of grad", signed_zeros=False)


# ------------------------------------------------ the forward-mode table


@pytest.mark.parametrize("name", FORWARD_OPS)
def test_forward_mode_of_a_forward_op_raises(name):
    """``jax.jvp``, ``jax.jacfwd`` and the function ``jax.linearize``
    returns (``linearize`` itself succeeds) raise JAX's ``custom_vjp`` error;
    so does reverse mode over a ``jvp`` of it, with JAX's internal error."""
    with jax.enable_x64(True):
        case = CASES[name]()
        a = jnp.asarray(distinct(case.shape))
        for transform in (
            lambda: jax.jvp(case.fn, (a,), (a,)),
            lambda: jax.jacfwd(case.fn)(a),
            lambda: jax.jacfwd(jax.jacfwd(lambda a: jnp.sum(case.fn(a) ** 3)))(a),
        ):
            with pytest.raises(TypeError) as raised:
                transform()
            assert str(raised.value) == CUSTOM_VJP
        _, linear = jax.linearize(case.fn, a)
        with pytest.raises(TypeError) as raised:
            linear(a)
        assert str(raised.value) == CUSTOM_VJP
        with pytest.raises(NotImplementedError, match="'custom_lin' not implemented"):
            jax.grad(lambda a: jnp.sum(jax.jvp(case.fn, (a,), (a,))[1]))(a)


@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_forward_mode_of_a_backward_op_works(name):
    """The backward ops are plain JAX (and Pallas's covering sum has a JVP
    rule), linear in ``grad_output``: ``jvp``, ``jacfwd`` and ``linearize``
    give the op applied to the tangent, and ``jacfwd`` equals ``jacrev``,
    at zero cotangents of either sign too (the deterministic sums take -0.0
    as +0.0, which must not drop their tangents)."""
    with jax.enable_x64(True):
        case = CASES[name]()
        g = distinct(case.shape, seed=21).reshape(-1)
        g[::4], g[1::4] = -0.0, 0.0
        g = jnp.asarray(g.reshape(case.shape))
        g_dot = jnp.asarray(small_ints(case.shape, seed=22))
        out, out_dot = jax.jvp(case.fn, (g,), (g_dot,))
        _, linear = jax.linearize(case.fn, g)
        jacfwd, jacrev = jax.jacfwd(case.fn)(g), jax.jacrev(case.fn)(g)
        want_dot = case.fn(g_dot)
        assert_same(out, case.fn(g))
    assert_same(out_dot, want_dot, "jvp")
    assert_same(linear(g_dot), want_dot, "linearize")
    assert_same(jacfwd, jacrev, "jacfwd", signed_zeros=False)


@pytest.mark.parametrize("name", ["max_pool3d-overlapping", "adaptive_max_pool2d"])
def test_tangent_is_a_gather_at_the_indices(name):
    """The docs' forward-mode recipe: the pooled tangent is the input's
    tangent at each argmax (what ``jax.jvp`` would return)."""
    pool = {
        "max_pool3d-overlapping": _pool(3, 3, 1, 1),
        "adaptive_max_pool2d": _adaptive(2, 3),
    }[name]
    with jax.enable_x64(True):
        x = jnp.asarray(distinct(CASES[name]().shape))
        x_dot = jnp.asarray(np.random.default_rng(9).standard_normal(x.shape))
        values, indices = pool(x)
        lead = x.shape[:2]
        y_dot = jnp.take_along_axis(
            x_dot.reshape(*lead, -1), indices.reshape(*lead, -1), axis=-1
        ).reshape(values.shape)
        jac = jax.jacrev(lambda x: pool(x)[0])(x)
    want = np.tensordot(np.asarray(jac), np.asarray(x_dot), axes=x.ndim)
    assert_close(y_dot, want, "float64")
