"""Property-based sweep: random valid pools against the NumPy oracle, exactly.

Shapes, window arguments (every padding form, ceil_mode, dilation), layouts,
dtypes and input kinds (random, ties, NaN, +-inf with all--inf windows) are
drawn; forward values and indices and both backward algorithms must equal the
oracle bit for bit (small-integer cotangents sum exactly in any order). The
"ci" profile runs in CI; ``--hypothesis-profile=thorough`` runs 2,000 examples
per test (``--hypothesis-show-statistics`` shows what was drawn).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from helpers import DTYPES, INPUT_KINDS, assert_same, cotangent, make_input, precision
from hypothesis import event, given
from hypothesis import strategies as st

import jaxpool
from jaxpool import reference


@st.composite
def pool_cases(draw):
    nd = draw(st.integers(1, 3))
    kernel, stride, dilation, padding, sizes = [], [], [], [], []
    for _ in range(nd):
        k = draw(st.integers(1, 4))
        d = draw(st.sampled_from([1, 1, 2, 3]))
        if draw(st.integers(0, 3)) == 0:  # a Flax-style (lo, hi) pair
            p = (draw(st.integers(0, d * (k - 1))), draw(st.integers(0, d * (k - 1))))
        else:
            p = draw(st.integers(0, k // 2))
        lo, hi = (p, p) if isinstance(p, int) else p
        smallest = max(1, d * (k - 1) + 1 - lo - hi)
        kernel.append(k)
        stride.append(draw(st.integers(1, 4)))
        dilation.append(d)
        padding.append(p)
        sizes.append(smallest + draw(st.integers(0, 6)))
    lead = draw(st.sampled_from([(2, 3), (1, 2), (3,), (0, 2)]))
    return dict(
        nd=nd,
        shape=(*lead, *sizes),
        kernel=tuple(kernel),
        stride=tuple(stride),
        padding=tuple(padding),
        dilation=tuple(dilation),
        ceil_mode=draw(st.booleans()),
        channels_last=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        kind=draw(st.sampled_from(INPUT_KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def _channels_last(arr, nd):
    return jnp.moveaxis(arr, arr.ndim - nd - 1, -1)


def _channels_first(arr, nd):
    return jnp.moveaxis(arr, -1, arr.ndim - nd - 1)


def _check(case, forward, backward, want):
    """Run ``forward``/``backward`` (jitted together) in the case's layout and
    compare with the oracle's ``want`` = (values, indices), channels-first."""
    nd, cl, dtype = case["nd"], case["channels_last"], case["dtype"]
    rng = np.random.default_rng(case["seed"])
    x = make_input(rng, case["shape"], dtype, case["kind"])
    g = cotangent(rng, want[0].shape, dtype)
    move = (lambda a: _channels_last(a, nd)) if cl else (lambda a: a)
    back = (lambda a: _channels_first(a, nd)) if cl else (lambda a: a)

    @jax.jit
    def run(x, g):
        (values, indices), vjp = jax.vjp(forward, x)
        (grad,) = vjp((g, np.zeros(indices.shape, jax.dtypes.float0)))
        gathered = backward(g, x, indices, algorithm="gather")
        return values, indices, grad, gathered

    with precision(dtype):
        values, indices, grad, gathered = run(move(jnp.asarray(x)), move(g))
    assert_same(back(values), want[0], "values")
    assert_same(back(indices), want[1], "indices")
    want_grad = reference.scatter_add(g, want[1], x.shape[x.ndim - nd :])
    want_grad = want_grad.astype(x.dtype)
    assert_same(back(grad), want_grad, "grad (scatter)")
    assert_same(back(gathered), want_grad, "grad (gather)")


def check_pool_case(case, **options):
    """A drawn strided pool (``options``: more keyword arguments of the op, as
    ``implementation``) against the oracle; returns the oracle's result."""
    nd = case["nd"]
    args = (
        case["kernel"],
        case["stride"],
        case["padding"],
        case["dilation"],
        case["ceil_mode"],
    )
    kw = dict(channels_last=case["channels_last"], **options)
    fwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    rng = np.random.default_rng(case["seed"])
    x = make_input(rng, case["shape"], case["dtype"], case["kind"])
    want = reference.max_pool(x, *args)
    _check(
        case,
        lambda x: fwd(x, *args, **kw),
        lambda g, x, i, **k: bwd(g, x, i, *args, **kw, **k),
        want,
    )
    return want


@given(pool_cases())
def test_max_pool_matches_oracle(case):
    want = check_pool_case(case)
    nd = case["nd"]
    overlapping = any(
        s < d * (k - 1) + 1
        for s, k, d in zip(
            case["stride"], case["kernel"], case["dilation"], strict=True
        )
    )
    event(f"{nd}-d")
    event(f"{case['dtype']}, {case['kind']}")
    event("overlapping windows" if overlapping else "disjoint windows")
    pairs = any(isinstance(p, tuple) for p in case["padding"])
    event("a (lo, hi) pair" if pairs else "ints")
    event("channels-last" if case["channels_last"] else "channels-first")
    event(f"outputs: {'<= 4' if want[0].size <= 4 else '> 4'}")
    if (np.asarray(want[1]) >= np.prod(case["shape"][-nd:])).any():
        event("a window with no in-bounds tap")


@st.composite
def adaptive_cases(draw):
    nd = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 11)) for _ in range(nd)]
    out = [draw(st.one_of(st.integers(1, 13), st.none())) for _ in range(nd)]
    lead = draw(st.sampled_from([(2, 3), (1, 2), (3,)]))
    return dict(
        nd=nd,
        shape=(*lead, *sizes),
        output_size=tuple(out),
        channels_last=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        kind=draw(st.sampled_from(INPUT_KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def check_adaptive_case(case, **options):
    """A drawn adaptive pool (``options`` as in :func:`check_pool_case`)
    against the oracle; returns the full output size."""
    nd = case["nd"]
    out = case["output_size"]
    kw = dict(channels_last=case["channels_last"], **options)
    fwd = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    bwd = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    rng = np.random.default_rng(case["seed"])
    x = make_input(rng, case["shape"], case["dtype"], case["kind"])
    full = tuple(
        s if o is None else o for s, o in zip(case["shape"][-nd:], out, strict=True)
    )
    _check(
        case,
        lambda x: fwd(x, out, **kw),
        lambda g, x, i, **k: bwd(g, x, i, **kw, **k),
        reference.adaptive_max_pool(x, full),
    )
    return full


@given(adaptive_cases())
def test_adaptive_max_pool_matches_oracle(case):
    full = check_adaptive_case(case)
    spatial = case["shape"][-case["nd"] :]
    event(f"{case['nd']}-d")
    uneven = any(s % o for s, o in zip(spatial, full, strict=True))
    event("non-integer ratio" if uneven else "integer ratios")
    larger = any(o > s for s, o in zip(spatial, full, strict=True))
    event("output larger than input" if larger else "output not larger")
