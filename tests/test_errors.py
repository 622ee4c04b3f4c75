"""Every bad argument raises at trace time, naming function, argument and value."""

from __future__ import annotations

import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpool
from jaxpool import tf

FWD = "max_pool3d_with_argmax"
BWD = "max_pool3d_with_argmax_backward"
X = jnp.zeros((1, 2, 4, 4, 4))

# (kwargs, exception, pattern after "<function>: ")
BAD_POOL_ARGS = [
    (dict(kernel_size=(2, 2)), ValueError, r"`kernel_size`.*\(2, 2\)"),
    (dict(kernel_size=()), ValueError, r"`kernel_size`.*\(\)"),
    (dict(kernel_size=0), ValueError, r"`kernel_size` must be positive.*0"),
    (dict(kernel_size=(2, -1, 2)), ValueError, r"`kernel_size` must be positive.*-1"),
    (dict(kernel_size=2.0), TypeError, r"`kernel_size` must contain ints, got 2.0"),
    (dict(kernel_size=True), TypeError, r"`kernel_size` must contain ints, got True"),
    (dict(kernel_size="2"), TypeError, r"`kernel_size` must contain ints, got '2'"),
    (dict(kernel_size=2, stride=(1, 1)), ValueError, r"`stride`.*\(1, 1\)"),
    (dict(kernel_size=2, stride=0), ValueError, r"`stride` must be positive.*0"),
    (dict(kernel_size=2, stride=-2), ValueError, r"`stride` must be positive.*-2"),
    (dict(kernel_size=2, padding=-1), ValueError, r"`padding`.*padding=-1 for"),
    (dict(kernel_size=3, padding=(1, 2, 1)), ValueError, r"`padding`.*\(1, 2, 1\)"),
    (dict(kernel_size=2, padding=(0, 0)), ValueError, r"`padding`.*\(0, 0\)"),
    (dict(kernel_size=2, dilation=0), ValueError, r"`dilation` must be positive.*0"),
    (dict(kernel_size=2, dilation=(1, 1)), ValueError, r"`dilation`.*\(1, 1\)"),
    (dict(kernel_size=2, ceil_mode=1), TypeError, r"`ceil_mode` must be a bool, got 1"),
    (dict(kernel_size=5), ValueError, r"output size \(0, 0, 0\) is too small"),
    (dict(kernel_size=2, dilation=4), ValueError, r"output size .* is too small"),
]


def _raises(exc, fn, pattern):
    return pytest.raises(exc, match=re.escape(f"{fn}: ") + pattern)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kwargs, exc, pattern", BAD_POOL_ARGS)
def test_bad_window_arguments(kwargs, exc, pattern, jit):
    fwd = partial(jaxpool.max_pool3d_with_argmax, **kwargs)
    with _raises(exc, FWD, pattern):
        (jax.jit(fwd) if jit else fwd)(X)
    g = jnp.zeros((1, 2, 2, 2, 2))
    bwd = partial(jaxpool.max_pool3d_with_argmax_backward, **kwargs)
    with _raises(exc, BWD, pattern):
        (jax.jit(bwd) if jit else bwd)(g, X, g.astype(jnp.int32))


@pytest.mark.parametrize(
    "x, exc, pattern",
    [
        (
            jnp.zeros((2, 4, 4, 4), jnp.int32),
            TypeError,
            r"`x` must have a floating dtype, got int32",
        ),
        (
            jnp.zeros((2, 4, 4, 4), bool),
            TypeError,
            r"`x` must have a floating dtype, got bool",
        ),
        (
            jnp.zeros((4, 4, 4)),
            ValueError,
            r"`x` must have 4 or 5 dimensions.*\(4, 4, 4\)",
        ),
        (jnp.zeros((1, 1, 1, 4, 4, 4)), ValueError, r"`x` must have 4 or 5 dimensions"),
        (
            jnp.zeros((1, 2, 0, 4, 4)),
            ValueError,
            r"spatial sizes of `x` must be >= 1.*\(1, 2, 0, 4, 4\)",
        ),
    ],
)
def test_bad_input(x, exc, pattern):
    with _raises(exc, FWD, pattern):
        jaxpool.max_pool3d_with_argmax(x, 2)
    with _raises(exc, FWD, pattern):
        jax.jit(partial(jaxpool.max_pool3d_with_argmax, kernel_size=2))(x)
    with _raises(exc, BWD, pattern):
        jaxpool.max_pool3d_with_argmax_backward(
            jnp.zeros((1, 1, 1, 1)), x, jnp.zeros((1, 1, 1, 1), jnp.int32), 2
        )


def test_huge_plane_is_rejected_before_indices_overflow():
    x = jax.ShapeDtypeStruct((1, 1, 2048, 1024, 1024), jnp.bfloat16)
    g = jax.ShapeDtypeStruct((1, 1, 1024, 512, 512), jnp.bfloat16)
    with _raises(
        ValueError,
        BWD,
        r"a spatial plane of `x` must have fewer than 2\*\*31 elements "
        r"\(indices are int32\)",
    ):
        jax.eval_shape(
            lambda g, i: jaxpool.max_pool3d_with_argmax_backward(g, x, i, 2),
            g,
            jax.ShapeDtypeStruct(g.shape, jnp.int32),
        )


@pytest.mark.parametrize(
    "grad_output, indices, exc, pattern",
    [
        (
            np.zeros((1, 2, 2, 2, 3)),
            np.zeros((1, 2, 2, 2, 2), np.int32),
            ValueError,
            r"`grad_output` must have the forward output's shape \(1, 2, 2, 2, 2\), "
            r"got shape \(1, 2, 2, 2, 3\)",
        ),
        (
            np.zeros((1, 2, 2, 2, 2)),
            np.zeros((2, 2, 2, 2), np.int32),
            ValueError,
            r"`indices` must have the forward output's shape .*"
            r"got shape \(2, 2, 2, 2\)",
        ),
        (
            np.zeros((1, 2, 2, 2, 2)),
            np.zeros((1, 2, 2, 2, 2)),
            TypeError,
            r"`indices` must have an integer dtype, got float32",
        ),
        (
            np.zeros((1, 2, 2, 2, 2)),
            np.zeros((1, 2, 2, 2, 2), bool),
            TypeError,
            r"`indices` must have an integer dtype, got bool",
        ),
        (
            np.zeros((1, 2, 2, 2, 2), np.int32),
            np.zeros((1, 2, 2, 2, 2), np.int32),
            TypeError,
            r"`grad_output` must have a floating dtype, got int32",
        ),
    ],
)
def test_bad_backward_arrays(grad_output, indices, exc, pattern):
    with _raises(exc, BWD, pattern):
        jaxpool.max_pool3d_with_argmax_backward(grad_output, X, indices, 2)
    with _raises(exc, BWD, pattern):
        jax.jit(partial(jaxpool.max_pool3d_with_argmax_backward, kernel_size=2))(
            grad_output, X, indices
        )


def test_shape_dtype_struct_x_must_be_floating():
    x = jax.ShapeDtypeStruct(X.shape, jnp.int32)
    with _raises(TypeError, BWD, r"`x` must have a floating dtype, got int32"):
        jaxpool.max_pool3d_with_argmax_backward(
            jnp.zeros((1, 2, 2, 2, 2)), x, jnp.zeros((1, 2, 2, 2, 2), jnp.int32), 2
        )


AFWD = "adaptive_max_pool2d"
ABWD = "adaptive_max_pool2d_backward"
X2 = jnp.zeros((2, 3, 8, 9))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "output_size, exc, pattern",
    [
        ((2, 2, 2), ValueError, r"`output_size` must be an int or a sequence of 2"),
        ((3,), ValueError, r"`output_size` must be an int or a sequence of 2.*\(3,\)"),
        (0, ValueError, r"`output_size` entries must be >= 1.*output_size=0"),
        ((2, -1), ValueError, r"`output_size` entries must be >= 1.*\(2, -1\)"),
        ((2.0, 3), TypeError, r"`output_size` must contain ints, got \(2.0, 3\)"),
        ("ab", TypeError, r"`output_size` must contain ints, got 'ab'"),
        (None, TypeError, r"`output_size` must be an int or a sequence .* got None"),
    ],
)
def test_adaptive_bad_output_size(output_size, exc, pattern, jit):
    fn = partial(jaxpool.adaptive_max_pool2d, output_size=output_size)
    with _raises(exc, AFWD, pattern):
        (jax.jit(fn) if jit else fn)(X2)


def test_adaptive_traced_output_size():
    with _raises(TypeError, AFWD, r"`output_size` must be a static .*static_argnames"):
        jax.jit(jaxpool.adaptive_max_pool2d)(X2, 3)


@pytest.mark.parametrize(
    "x, exc, pattern",
    [
        (jnp.zeros((2, 8, 9), jnp.int8), TypeError, r"`x` must have a floating dtype"),
        (jnp.zeros((8, 9)), ValueError, r"`x` must have 3 or 4 dimensions.*\(8, 9\)"),
        (jnp.zeros((1, 2, 3, 8, 9)), ValueError, r"`x` must have 3 or 4 dimensions"),
        (jnp.zeros((2, 3, 0, 9)), ValueError, r"spatial sizes of `x` must be >= 1"),
    ],
)
def test_adaptive_bad_input(x, exc, pattern):
    with _raises(exc, AFWD, pattern):
        jaxpool.adaptive_max_pool2d(x, 2)
    with _raises(exc, ABWD, pattern):
        jaxpool.adaptive_max_pool2d_backward(
            jnp.zeros((2, 3, 2, 2)), x, jnp.zeros((2, 3, 2, 2), jnp.int32)
        )


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "grad_output, indices, exc, pattern",
    [
        (
            np.zeros((2, 4, 2, 2)),
            np.zeros((2, 4, 2, 2), np.int32),
            ValueError,
            r"`grad_output` must have the shape of `x` \(\(2, 3, 8, 9\)\) "
            r"with its 2 spatial sizes >= 1",
        ),
        (
            np.zeros((3, 2, 2)),
            np.zeros((3, 2, 2), np.int32),
            ValueError,
            r"`grad_output` must have the shape of `x`.*got shape \(3, 2, 2\)",
        ),
        (
            np.zeros((2, 3, 0, 2)),
            np.zeros((2, 3, 0, 2), np.int32),
            ValueError,
            r"`grad_output` must have the shape of `x`.*got shape \(2, 3, 0, 2\)",
        ),
        (
            np.zeros((2, 3, 2, 2)),
            np.zeros((2, 3, 2, 3), np.int32),
            ValueError,
            r"`indices` must have `grad_output`'s shape \(2, 3, 2, 2\), "
            r"got shape \(2, 3, 2, 3\)",
        ),
        (
            np.zeros((2, 3, 2, 2)),
            np.zeros((2, 3, 2, 2)),
            TypeError,
            r"`indices` must have an integer dtype, got float32",
        ),
        (
            np.zeros((2, 3, 2, 2), np.int32),
            np.zeros((2, 3, 2, 2), np.int32),
            TypeError,
            r"`grad_output` must have a floating dtype, got int32",
        ),
    ],
)
def test_adaptive_bad_backward_arrays(grad_output, indices, exc, pattern, jit):
    fn = jaxpool.adaptive_max_pool2d_backward
    with _raises(exc, ABWD, pattern):
        (jax.jit(fn) if jit else fn)(grad_output, X2, indices)


def test_bad_algorithm():
    g = jnp.zeros((1, 2, 2, 2, 2))
    i = g.astype(jnp.int32)
    pattern = r"`algorithm` must be one of \('auto', 'scatter', 'gather'\), got 'fast'"
    with _raises(ValueError, FWD, pattern):
        jaxpool.max_pool3d_with_argmax(X, 2, algorithm="fast")
    with _raises(ValueError, BWD, pattern):
        jaxpool.max_pool3d_with_argmax_backward(g, X, i, 2, algorithm="fast")
    with _raises(ValueError, AFWD, pattern):
        jaxpool.adaptive_max_pool2d(X2, 2, algorithm="fast")
    with _raises(ValueError, ABWD, pattern):
        jaxpool.adaptive_max_pool2d_backward(
            jnp.zeros((2, 3, 2, 2)),
            X2,
            jnp.zeros((2, 3, 2, 2), jnp.int32),
            algorithm="fast",
        )


# ------------------------------------------- every public function of the family

SPATIAL = {1: (6,), 2: (6, 5), 3: (6, 5, 4)}


def _x(nd, channels_last=False, lead=(2, 4)):
    n, c = lead
    shape = (n, *SPATIAL[nd], c) if channels_last else (n, c, *SPATIAL[nd])
    return jnp.zeros(shape)


def _pool_cases():
    for nd in (1, 2, 3):
        fwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
        bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
        name, bname = fwd.__name__, bwd.__name__
        x = _x(nd)
        out = jnp.zeros((2, 4, *(s // 2 for s in SPATIAL[nd])))
        idx = out.astype(jnp.int32)
        bad = [
            (dict(kernel_size=(2,) * (nd + 1)), ValueError, r"`kernel_size`"),
            (dict(kernel_size=0), ValueError, r"`kernel_size` must be positive"),
            (dict(kernel_size=-2), ValueError, r"`kernel_size` must be positive"),
            (dict(kernel_size=1.5), TypeError, r"`kernel_size` must contain ints"),
            (dict(kernel_size=2, stride=0), ValueError, r"`stride` must be positive"),
            (dict(kernel_size=2, dilation=-1), ValueError, r"`dilation` must be pos"),
            (dict(kernel_size=2, padding=2), ValueError, r"`padding` must be betw"),
            (dict(kernel_size=2, padding=[(0, 2)] * nd), ValueError, r"each side"),
            (dict(kernel_size=2, padding=[(-1, 0)] * nd), ValueError, r"each side"),
            (
                dict(kernel_size=2, padding=[(0, 1, 2)] * nd),
                ValueError,
                r"`padding` pairs",
            ),
            (
                dict(kernel_size=2, padding="FULL"),
                ValueError,
                r"`padding` must be 'SAME'",
            ),
            (dict(kernel_size=9), ValueError, r"output size .* too small"),
            (dict(kernel_size=2, channels_last=1), TypeError, r"`channels_last`"),
        ]
        for kwargs, exc, pattern in bad:
            yield name, partial(fwd, x, **kwargs), exc, pattern
            yield bname, partial(bwd, out, x, idx, **kwargs), exc, pattern
        yield name, partial(fwd, x[0, 0], 2), ValueError, r"`x` must have"
        yield name, partial(fwd, x.astype(bool), 2), TypeError, r"`x` must have a fl"
        yield name, partial(fwd, x.astype(int), 2), TypeError, r"`x` must have a fl"
        yield bname, partial(bwd, out, x, out, 2), TypeError, r"`indices` must have an"
        yield bname, partial(bwd, idx, x, idx, 2), TypeError, r"`grad_output` must"
        yield bname, partial(bwd, out[:1], x, idx, 2), ValueError, r"`grad_output`"
        yield bname, partial(bwd, out, x, idx[:, :1], 2), ValueError, r"`indices`"
        yield (
            bname,
            partial(bwd, jnp.moveaxis(out, 1, -1), x, idx, 2),
            ValueError,
            r"`grad_output` .*that is the channels-last layout: check `channels_last`",
        )
        yield (
            bname,
            partial(bwd, out, x, idx, 2, check_indices="yes"),
            TypeError,
            r"`check_indices` must be a bool",
        )


def _adaptive_cases():
    for nd in (1, 2, 3):
        fwd = getattr(jaxpool, f"adaptive_max_pool{nd}d")
        bwd = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
        name, bname = fwd.__name__, bwd.__name__
        x = _x(nd, channels_last=True)
        out = jnp.zeros((2, *(2,) * nd, 4))
        idx = out.astype(jnp.int32)
        for size, exc, pattern in [
            ((2,) * (nd + 1), ValueError, r"`output_size` must be an int or a seq"),
            (0, ValueError, r"`output_size` entries must be >= 1"),
            (-3, ValueError, r"`output_size` entries must be >= 1"),
            (2.0, TypeError, r"`output_size` must contain ints"),
            (None, TypeError, r"`output_size` must be an int"),
        ]:
            yield name, partial(fwd, x, size, channels_last=True), exc, pattern
        yield name, partial(fwd, x[0, 0], 2), ValueError, r"`x` must have"
        yield name, partial(fwd, x.astype(bool), 2), TypeError, r"`x` must have a fl"
        kw = dict(channels_last=True)
        yield bname, partial(bwd, out, x, out, **kw), TypeError, r"`indices` must"
        yield bname, partial(bwd, out[:1], x, idx, **kw), ValueError, r"`grad_output`"
        yield bname, partial(bwd, out, x, idx[..., :1], **kw), ValueError, r"`indices`"
        yield (
            bname,
            partial(bwd, out, x, jnp.moveaxis(idx, -1, 1)[..., :2], **kw),
            ValueError,
            r"`indices` must have `grad_output`'s shape \(2, (2, )+4\), got",
        )


def _unpool_cases():
    for nd in (1, 2, 3):
        fn = getattr(jaxpool, f"max_unpool{nd}d")
        name = fn.__name__
        v = jnp.zeros((2, 3, *(2,) * nd))
        i = v.astype(jnp.int32)
        spatial = (4,) * nd  # kernel_size=2's default; PyTorch allows 3 to 5
        for size, exc, pattern in [
            ((4,) * (nd + 1), ValueError, rf"`output_size` must have {nd} entries"),
            ((0,) * nd, ValueError, r"`output_size` must have spatial sizes >= 1"),
            ((-4,) * nd, ValueError, r"`output_size` must have spatial sizes >= 1"),
            ((4.0,) * nd, TypeError, r"`output_size` must contain ints"),
            (4, TypeError, r"`output_size` must be a sequence"),
            ((9, 3, *spatial), ValueError, r"`output_size` as a whole shape must"),
            (
                (2, 4, *spatial),
                ValueError,
                r"`output_size` as a whole shape must have the batch and channel "
                r"sizes of `x` \(shape \(2, 3, .*got \(2, 4, ",
            ),
        ]:
            yield name, partial(fn, v, i, output_size=size), exc, pattern
            yield name, partial(fn, v, i, 2, output_size=size), exc, pattern
        # PyTorch's range: strictly between default - stride and default + stride.
        for size, dim, low, high in [
            ((4,) * (nd - 1) + (32,), nd - 1, 2, 6),
            ((2,) * nd, 0, 2, 6),
            ((6,) * nd, 0, 2, 6),
        ]:
            got = re.escape(repr(size))
            pattern = rf"`output_size` {got} is invalid \(dim {dim} must be between "
            pattern += rf"{low} and {high}, exclusive\)"
            yield name, partial(fn, v, i, 2, output_size=size), ValueError, pattern
        yield (
            name,
            partial(fn, v, i, 3, 1, 1, output_size=(1,) * nd),  # default 2, stride 1
            ValueError,
            r"`output_size` .* \(dim 0 must be between 1 and 3, exclusive\)",
        )
        yield (
            name,
            partial(fn, v, i),
            TypeError,
            r"`output_size` is required without `kernel_size`",
        )
        nhwc = jnp.zeros((2, *(2,) * nd, 3))
        yield (
            name,
            partial(
                fn,
                nhwc,
                nhwc.astype(int),
                2,
                output_size=(2, 3, *spatial),
                channels_last=True,
            ),
            ValueError,
            r"`output_size` as a whole shape .*channels-first layout: check `chan",
        )
        for kwargs, exc, pattern in [
            (dict(stride=2), ValueError, r"`stride` needs `kernel_size`"),
            (dict(padding=1), ValueError, r"`padding` needs `kernel_size`"),
        ]:
            call = partial(fn, v, i, output_size=spatial, **kwargs)
            yield name, call, exc, pattern
        for kwargs, exc, pattern in [
            (dict(kernel_size=0), ValueError, r"`kernel_size` must be positive, got"),
            (dict(kernel_size=-2), ValueError, r"`kernel_size` must be positive"),
            (dict(kernel_size=1.5), TypeError, r"`kernel_size` must contain ints"),
            (dict(kernel_size="2"), TypeError, r"`kernel_size` must contain ints"),
            (dict(kernel_size=(2,) * (nd + 1)), ValueError, r"`kernel_size` must be"),
            (dict(kernel_size=2, stride=0), ValueError, r"`stride` must be positive"),
            (dict(kernel_size=2, stride=1.0), TypeError, r"`stride` must contain int"),
            (dict(kernel_size=2, padding=-1), ValueError, r"`padding` must be betwe"),
            (dict(kernel_size=2, padding=2), ValueError, r"`padding` must be between"),
            (dict(kernel_size=3, padding=1.0), TypeError, r"`padding` must contain"),
        ]:
            yield name, partial(fn, v, i, **kwargs), exc, pattern
        one = jnp.zeros((2, 3, *(1,) * nd))
        yield (
            name,
            partial(fn, one, one.astype(int), 2, padding=1),
            ValueError,
            r"the default output size .* is \((0, )*0,?\), below 1",
        )
        if nd == 3:
            big = (2**11,) * 3
            call = partial(fn, v, i, output_size=big)
            yield name, call, ValueError, r"the output must have fewer than 2\*\*31"
        yield (
            name,
            partial(fn, v[0, 0], i[0, 0], output_size=spatial),
            ValueError,
            r"`x` must",
        )
        yield name, partial(fn, i, i, 2), TypeError, r"`x` must have a floating"
        yield name, partial(fn, v, v, 2), TypeError, r"`indices` must have an in"
        yield name, partial(fn, v, i[:1], 2), ValueError, r"`indices` must have"
        yield (
            name,
            partial(fn, v, i, 2, check_indices=1),
            TypeError,
            r"`check_indices` must be a bool",
        )


# Fractional pools: (nd, kwargs, exception, pattern) on x of (2, 3, 8, 9) or
# (2, 3, 8, 8, 8) with zero samples.
FX = {2: jnp.zeros((2, 3, 8, 9)), 3: jnp.zeros((2, 3, 8, 8, 8))}
FRACTIONAL_ARGS = [
    (2, dict(kernel_size=2), ValueError, r"exactly one of `output_size` and "),
    (
        2,
        dict(kernel_size=2, output_size=3, output_ratio=0.5),
        ValueError,
        r"exactly one of `output_size` and `output_ratio`.*output_size=3, "
        r"output_ratio=0.5",
    ),
    (2, dict(kernel_size=0, output_size=3), ValueError, r"`kernel_size` must be posi"),
    (2, dict(kernel_size=(2, 2, 2), output_size=3), ValueError, r"`kernel_size`"),
    (2, dict(kernel_size=2.0, output_size=3), TypeError, r"`kernel_size` must contain"),
    (2, dict(kernel_size=2, output_size=(3, 3, 3)), ValueError, r"`output_size`"),
    (2, dict(kernel_size=2, output_size=(8, 8)), ValueError, r".*at most the input"),
    (3, dict(kernel_size=2, output_size=(2, 7, 2)), ValueError, r".*less than the in"),
    (
        2,
        dict(kernel_size=3, output_size=(7, 3)),
        ValueError,
        r"`output_size` \+ `kernel_size` - 1 must be at most the input size per "
        r"axis, got output_size=\(7, 3\) for kernel_size=\(3, 3\) and input spatial "
        r"size \(8, 9\)",
    ),
    (
        2,
        dict(kernel_size=2, output_ratio=1.0),
        ValueError,
        r"`output_ratio` must lie in \(0, 1\) per axis, got output_ratio=1.0",
    ),
    (2, dict(kernel_size=2, output_ratio=(0.5, 0.0)), ValueError, r".*in \(0, 1\)"),
    (2, dict(kernel_size=2, output_ratio="0.5"), ValueError, r"`output_ratio` must"),
    (
        2,
        dict(kernel_size=2, output_ratio=(True, 0.5)),
        TypeError,
        r"`output_ratio` must contain static Python numbers, got \(True, 0.5\)",
    ),
    (
        2,
        dict(kernel_size=2, output_ratio=(0.5, None)),
        TypeError,
        r"`output_ratio` must contain numbers, got \(0.5, None\)",
    ),
    (
        2,
        dict(kernel_size=2, output_ratio=0.05),
        ValueError,
        r".*output size must be >=",
    ),
    (
        2,
        dict(kernel_size=5, output_ratio=0.9),
        ValueError,
        r".*got output_ratio=0.9 \(output size \(7, 8\)\) for kernel_size=\(5, 5\)",
    ),
    (
        2,
        dict(kernel_size=2, output_size=3, implementation="pallas"),
        ValueError,
        r"`implementation` must be None or 'xla'",
    ),
    (
        2,
        dict(kernel_size=2, output_size=3, algorithm="fast"),
        ValueError,
        r"`algorithm` must be one of",
    ),
]
X2F, S2 = FX[2], jnp.zeros((2, 3, 2))
# (x, samples, key, exception, pattern) of fractional_max_pool2d(x, 2, 3, ...).
FRACTIONAL_SAMPLES = [
    (X2F, None, None, ValueError, r"exactly one of `samples` and `key`.*neither"),
    (X2F, S2, jax.random.key(0), ValueError, r"exactly one of `samples`.*both"),
    (
        X2F,
        S2.astype(jnp.bfloat16),
        None,
        TypeError,
        r"`samples` must have the dtype of `x` \(float32\), got bfloat16",
    ),
    (
        X2F,
        jnp.zeros((1, 3, 2)),
        None,
        ValueError,
        r"`samples` must have shape \(N, C, 2\) with N >= 2, C=3, for x of shape "
        r"\(2, 3, 8, 9\), got shape \(1, 3, 2\)",
    ),
    (X2F, jnp.zeros((2, 3, 3)), None, ValueError, r"`samples`.*\(2, 3, 3\)"),
    (X2F, jnp.zeros((3, 2)), None, ValueError, r"`samples`.*got shape \(3, 2\)"),
    (
        X2F[0],
        jnp.zeros((2, 2)),
        None,
        ValueError,
        r"`samples`.*\(N, C, 2\) with N >= 1 or \(C, 2\), C=3.*got shape \(2, 2\)",
    ),
    (X2F, None, 3, TypeError, r"`key` must be a JAX PRNG key, got 3"),
    (X2F.astype(jnp.int32), S2, None, TypeError, r"`x` must have a floating"),
    (X2F[0, 0], S2, None, ValueError, r"`x` must have 3 or 4 dimensions"),
]


def _fractional_cases():
    for nd, kwargs, exc, pattern in FRACTIONAL_ARGS:
        fwd = getattr(jaxpool, f"fractional_max_pool{nd}d")
        samples = jnp.zeros((2, 3, nd))
        yield (
            fwd.__name__,
            partial(fwd, FX[nd], samples=samples, **kwargs),
            exc,
            pattern,
        )
    fwd = jaxpool.fractional_max_pool2d
    for x, samples, key, exc, pattern in FRACTIONAL_SAMPLES:
        call = partial(fwd, x, 2, 3, samples=samples, key=key)
        yield fwd.__name__, call, exc, pattern
    bwd = jaxpool.fractional_max_pool3d_backward
    name = bwd.__name__
    x, g = jnp.zeros((1, 2, 6, 6, 6)), jnp.zeros((1, 2, 3, 3, 3))
    i = g.astype(jnp.int32)
    yield name, partial(bwd, g[0], x, i[0]), ValueError, r"`grad_output` must have th"
    yield (
        name,
        partial(bwd, g, x, jnp.zeros((1, 2, 3, 3, 2), int)),
        ValueError,
        r"`indices` must have `grad_output`'s shape",
    )
    yield name, partial(bwd, g, x, g), TypeError, r"`indices` must have an integer"
    yield (
        name,
        partial(bwd, g, x, i, implementation="pallas"),
        ValueError,
        r"`implementation` must be None or 'xla'",
    )
    yield (
        name,
        partial(bwd, g, x, i, algorithm="fast"),
        ValueError,
        r"`algorithm` must be one of",
    )


def _tf_cases():
    """jaxpool.tf: TensorFlow's argument forms and names."""
    fwd, bwd, unpool = (
        tf.max_pool_with_argmax,
        tf.max_pool_grad_with_argmax,
        tf.max_unpool,
    )
    name, bname, uname = fwd.__name__, bwd.__name__, unpool.__name__
    x = jnp.zeros((2, 5, 6, 3))
    out = jnp.zeros((2, 2, 3, 3))
    idx = out.astype(jnp.int32)
    window = (2, 2, "VALID")
    for args, kwargs, exc, pattern in [
        (
            (2, 2, "VALID"),
            dict(data_format="NCHW"),
            ValueError,
            r"`data_format` must be 'NHWC', got 'NCHW'",
        ),
        (
            ([2, 2, 2], 2, "VALID"),
            {},
            ValueError,
            r"`ksize` must be an int or a sequence of 1, 2 or 4 ints, got \[2, 2, 2\]",
        ),
        ((0, 2, "VALID"), {}, ValueError, r"`ksize` must be positive, got ksize=0"),
        ((2.0, 2, "VALID"), {}, TypeError, r"`ksize` must contain ints, got 2.0"),
        (("2", 2, "VALID"), {}, TypeError, r"`ksize` must contain ints, got '2'"),
        (
            ([2, 2, 2, 1], 2, "VALID"),
            {},
            ValueError,
            r"`ksize` of 4 entries must be \[1, h, w, 1\]",
        ),
        (
            (2, [1, 2, 2, 2], "VALID"),
            {},
            ValueError,
            r"`strides` of 4 entries must be \[1, h, w, 1\]",
        ),
        (
            (2, (2, 0), "VALID"),
            {},
            ValueError,
            r"`strides` must be positive, got strides=\(2, 0\)",
        ),
        (
            (2, 2, "same"),
            {},
            ValueError,
            r"`padding` must be 'SAME' or 'VALID', got 'same'",
        ),
        (
            (2, 2, [[0, 0], [1, 1], [1, 1], [0, 0]]),
            {},
            ValueError,
            r"`padding` must be 'SAME' or 'VALID'",
        ),
        (
            (6, 2, "VALID"),
            {},
            ValueError,
            r"with padding='VALID' `ksize` must fit the input, got ksize=6",
        ),
        (
            window,
            dict(output_dtype="int16"),
            TypeError,
            r"`output_dtype` must be int32 or int64, got 'int16'",
        ),
        (
            window,
            dict(output_dtype=np.float32),
            TypeError,
            r"`output_dtype` must be int32 or int64",
        ),
        (
            window,
            dict(include_batch_in_index=1),
            TypeError,
            r"`include_batch_in_index` must be a bool, got 1",
        ),
        (window, dict(algorithm="fast"), ValueError, r"`algorithm` must be one of"),
    ]:
        yield name, partial(fwd, x, *args, **kwargs), exc, pattern
        if (
            "output_dtype" not in kwargs
            and "data_format" not in kwargs
            and "algorithm" not in kwargs
        ):
            yield bname, partial(bwd, x, out, idx, *args, **kwargs), exc, pattern
    yield (
        name,
        partial(fwd, x[0], *window),
        ValueError,
        r"`input` must have 4 dimensions \(N, H, W, C\)",
    )
    yield (
        name,
        partial(fwd, x.astype(int), *window),
        TypeError,
        r"`input` must have a floating dtype, got int",
    )
    yield (
        bname,
        partial(bwd, x, out[:, :1], idx, *window),
        ValueError,
        r"`grad` must have the forward output's shape \(2, 2, 3, 3\), "
        r"got shape \(2, 1, 3, 3\)",
    )
    yield (
        bname,
        partial(bwd, x, out, idx[..., :1], *window),
        ValueError,
        r"`argmax` must have the forward output's shape",
    )
    yield (
        bname,
        partial(bwd, x, out, out, *window),
        TypeError,
        r"`argmax` must have an integer dtype, got float32",
    )
    yield (
        bname,
        partial(bwd, x, out.astype(jnp.float16), idx, *window),
        TypeError,
        r"`grad` must have `input`'s dtype float32, got float16",
    )
    yield (
        bname,
        partial(bwd, x, out, idx, *window, check_indices="yes"),
        TypeError,
        r"`check_indices` must be a bool",
    )
    for size, exc, pattern in [
        (
            5,
            TypeError,
            r"`output_shape` must be a sequence of 2 ints \(or the whole shape\), "
            r"got 5",
        ),
        (
            (5, 6, 3),
            ValueError,
            r"`output_shape` must have 2 entries \(the spatial sizes\) or 4",
        ),
        ((0, 6), ValueError, r"`output_shape` must have sizes >= 1, got \(0, 6\)"),
        ((5.0, 6), TypeError, r"`output_shape` must contain ints"),
        (
            (3, 5, 6, 3),
            ValueError,
            r"`output_shape` as a whole shape must have the batch and channel sizes",
        ),
    ]:
        yield uname, partial(unpool, out, idx, size), exc, pattern
    yield (
        uname,
        partial(unpool, out[0], idx[0], (5, 6)),
        ValueError,
        r"`values` must have 4 dimensions",
    )
    yield (
        uname,
        partial(unpool, out, idx[:1], (5, 6)),
        ValueError,
        r"`argmax` must have `values`' shape \(2, 2, 3, 3\)",
    )
    yield (
        uname,
        partial(unpool, out, out, (5, 6)),
        TypeError,
        r"`argmax` must have an integer dtype",
    )
    yield (
        uname,
        partial(unpool, idx, idx, (5, 6)),
        TypeError,
        r"`values` must have a floating dtype",
    )


FAMILY = [
    *_pool_cases(),
    *_adaptive_cases(),
    *_unpool_cases(),
    *_fractional_cases(),
    *_tf_cases(),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "name, call, exc, pattern",
    FAMILY,
    ids=[f"{c[0]}-{k}" for k, c in enumerate(FAMILY)],
)
def test_every_public_function_rejects_bad_input(name, call, exc, pattern, jit):
    """Raised before any computation, naming the function and the argument;
    the same when the arrays are traced under jit."""
    if jit:
        arrays = {k: v for k, v in call.keywords.items() if isinstance(v, jax.Array)}
        static = {k: v for k, v in call.keywords.items() if k not in arrays}
        args = [a for a in call.args if isinstance(a, jax.Array)]
        statics = [a for a in call.args if not isinstance(a, jax.Array)]
        assert call.args[: len(args)] == tuple(args)

        def call_jitted(args, arrays):
            return call.func(*args, *statics, **static, **arrays)

        with _raises(exc, name, pattern):
            jax.jit(call_jitted)(args, arrays)
    else:
        with _raises(exc, name, pattern):
            call()
