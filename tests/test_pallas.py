"""``implementation="pallas"``: the Triton kernels, run here in Pallas's
interpret mode (the oracle grids, the sweeps and the torch comparisons run
them as their ``pallas`` form: ``tests/test_oracle.py``, ``tests/test_torch.py``);
lowered for CUDA on a grid of configurations; and the choice
``implementation=None`` makes.

On CPU the platform seam runs the kernels through Pallas's interpreter (the
same kernel code, slow), so every rule of the semantics is checked here bit
for bit; ``jit(...).lower(lowering_platforms=("cuda",))`` then builds the GPU
program, which holds the Triton custom call and fails on any array of a size
that is not a power of two.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from cases import DTYPES
from helpers import assert_same, cotangent, make_input, rng_for
from jax import export

import jaxpool
from jaxpool import _policy

# The full tier (tests/conftest.py): the Pallas kernels are a kernel form.
pytestmark = pytest.mark.full

PALLAS = dict(implementation="pallas")
TRITON = "__gpu$xla.gpu.triton"


@pytest.mark.parametrize("layout", ["channels-first", "channels-last"])
def test_layouts_and_16_bit_gradients_within_rounding(layout):
    """Random (not small-integer) cotangents, overlapping windows, bfloat16:
    the Pallas backward accumulates in float32 and rounds once, adding in the
    XLA gather backward's order, so the two agree bit for bit."""
    rng = rng_for("pallas-layout", layout)
    cl = layout == "channels-last"
    x = make_input(rng, (2, 5, 7, 6, 3) if cl else (2, 3, 5, 7, 6), "bfloat16", "ties")
    kw = dict(channels_last=cl)
    values, indices = jaxpool.max_pool3d_with_argmax(x, 3, 1, 1, **kw, **PALLAS)
    want = jaxpool.max_pool3d_with_argmax(x, 3, 1, 1, **kw)
    assert_same(values, want[0], "values")
    assert_same(indices, want[1], "indices")
    g = rng.standard_normal(values.shape).astype(values.dtype)
    pallas = jaxpool.max_pool3d_with_argmax_backward(
        g, x, indices, 3, 1, 1, **kw, algorithm="gather", **PALLAS
    )
    xla = jaxpool.max_pool3d_with_argmax_backward(
        g, x, indices, 3, 1, 1, **kw, algorithm="gather"
    )
    assert_same(pallas, xla, "pallas vs xla gather backward")


# ------------------------------------------------------------- transforms


def test_vmap_and_grad_of_grad():
    """vmap over the kernels, and grad of grad through the Pallas backward
    (its VJP reads the cotangent at the indices that count)."""
    rng = rng_for("pallas-transforms")
    x = make_input(rng, (3, 2, 2, 6, 7), "float32", "random")
    pool = lambda x, **kw: jaxpool.max_pool2d_with_argmax(x, 3, 2, 1, **kw)  # noqa: E731
    got = jax.vmap(lambda x: pool(x, **PALLAS))(x)
    want = jax.vmap(pool)(x)
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)
    w = jnp.asarray(cotangent(rng, want[0].shape[1:], "float32"))

    def loss(x, **kw):
        return jnp.sum(w * pool(x, **kw)[0] ** 3)

    def outer(x, **kw):
        return jnp.sum(jnp.sin(jax.grad(lambda x: loss(x, **kw))(x)))

    with jax.enable_x64(True):
        x64 = jnp.asarray(x[0], jnp.float64)
        assert_same(jax.grad(lambda x: outer(x, **PALLAS))(x64), jax.grad(outer)(x64))


def test_backward_has_no_atomics():
    """The deterministic backward is a gather by construction: no atomic
    read-modify-write in the Triton program."""
    x = jax.ShapeDtypeStruct((2, 3, 9, 10), jnp.float32)
    g = jax.ShapeDtypeStruct((2, 3, 5, 5), jnp.float32)
    i = jax.ShapeDtypeStruct((2, 3, 5, 5), jnp.int32)
    bwd = jax.jit(
        lambda g, i: jaxpool.max_pool2d_with_argmax_backward(
            g, x, i, 3, 2, 1, algorithm="gather", **PALLAS
        )
    )
    text = bwd.trace(g, i).lower(lowering_platforms=("cuda",)).as_text()
    assert TRITON in text and "atomic" not in text
    assert "stablehlo.scatter" not in text


# --------------------------------------------------------- cuda lowering

LOWERED = [
    (3, (2, 3, 9, 10, 11), dict(kernel_size=3, stride=2, padding=1)),
    (3, (1, 2, 9, 10, 11), dict(kernel_size=7, stride=1, padding=3)),  # a loop
    (3, (2, 5, 6, 7, 3), dict(kernel_size=2, channels_last=True)),
    (2, (2, 3, 17, 9), dict(kernel_size=(3, 2), stride=(2, 1), padding="SAME")),
    (2, (1, 2, 7, 9), dict(kernel_size=2, stride=1, padding=1, dilation=3)),
    (1, (2, 3, 100), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nd, shape, kwargs", LOWERED, ids=str)
def test_pool_lowers_for_cuda(nd, shape, kwargs, dtype):
    """Forward, backward and a training step lower for CUDA with the Triton
    kernel in each program (and nothing of XLA's scan or scatter)."""
    fwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    x = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
    out = jax.eval_shape(lambda x: fwd(x, **kwargs), x)[0]
    i = jax.ShapeDtypeStruct(out.shape, jnp.int32)
    programs = [
        (lambda x: fwd(x, **kwargs, **PALLAS), (x,)),
        (lambda g, i: bwd(g, x, i, **kwargs, algorithm="gather", **PALLAS), (out, i)),
        (jax.grad(lambda x: jnp.sum(fwd(x, **kwargs, **PALLAS)[0])), (x,)),
    ]
    with jax.enable_x64(dtype == "float64"):
        for f, args in programs:
            text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
            assert TRITON in text
            assert "stablehlo.scatter" not in text


@pytest.mark.parametrize(
    "nd, shape, output_size",
    [
        (2, (2, 3, 97, 131), (13, 17)),
        (3, (1, 2, 5, 7, 6), (3, 4, None)),
        (1, (3, 70), 4),
    ],
    ids=str,
)
def test_adaptive_lowers_for_cuda(nd, shape, output_size):
    fwd = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    step = jax.grad(lambda x: jnp.sum(fwd(x, output_size, **PALLAS)[0]))
    text = jax.jit(step).trace(x).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count(TRITON) == 2  # the forward and the backward kernel


# ------------------------------------------------- implementation=None


def _lowered(platform):
    x = jax.ShapeDtypeStruct((2, 3, 9, 10), jnp.float32)
    step = jax.grad(lambda x: jnp.sum(jaxpool.max_pool2d_with_argmax(x, 3, 2, 1)[0]))
    return jax.jit(step).trace(x).lower(lowering_platforms=(platform,)).as_text()


def test_none_is_xla_until_measured():
    """The H200 run of 2026-12-04 took no Pallas kernel into the default (its
    gather backward slower than XLA's scatter, its Triton backend deprecated):
    ``None`` is XLA everywhere, so the default program exports for every
    platform at once."""
    assert frozenset() == _policy.PALLAS_ON_GPU
    assert TRITON not in _lowered("cuda")


def test_none_decides_at_trace_time(monkeypatch, retrace):
    """Where a measurement names a kernel, ``None`` takes Pallas when JAX's
    default backend is a GPU, decided while tracing and never inside
    ``lax.platform_dependent``: on a CPU host it stays XLA, so a multi-platform
    export still works; on a GPU host the program holds the Triton kernels.
    Both hosts are patched in, so that the test asserts the same on either."""
    monkeypatch.setattr(_policy, "PALLAS_ON_GPU", frozenset({"forward", "backward"}))
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    jax.clear_caches()
    assert TRITON not in _lowered("cuda")  # traced on a CPU host
    x = jax.ShapeDtypeStruct((2, 3, 9, 10), jnp.float32)
    pool = jax.jit(lambda x: jaxpool.max_pool2d_with_argmax(x, 3, 2, 1))
    exported = export.export(pool, platforms=("cpu", "cuda", "tpu"))(x)
    assert exported.platforms == ("cpu", "cuda", "tpu")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    jax.clear_caches()
    assert _lowered("cuda").count(TRITON) == 2


def test_explicit_pallas_exports_only_by_choice():
    """Pallas's Triton custom call has no serialisation compatibility
    guarantee, so ``jax.export`` refuses it unless told otherwise, and a Pallas
    GPU kernel cannot be lowered for a CPU: the exportable programs are those of
    ``None`` (XLA everywhere until measured) and ``"xla"``."""
    x = jax.ShapeDtypeStruct((2, 3, 9, 10), jnp.float32)
    pool = jax.jit(lambda x: jaxpool.max_pool2d_with_argmax(x, 3, 2, 1, **PALLAS))
    with pytest.raises(ValueError, match="no compatibility guarantees"):
        export.export(pool, platforms=("cuda",))(x)
    accept = [export.DisabledSafetyCheck.custom_call(TRITON)]
    exported = export.export(pool, platforms=("cuda",), disabled_checks=accept)(x)
    assert TRITON in exported.mlir_module()
    with pytest.raises(ValueError, match="interpret"):
        export.export(pool, platforms=("cpu", "cuda"), disabled_checks=accept)(x)


def test_bad_implementation():
    x = jnp.zeros((1, 1, 4, 4))
    with pytest.raises(
        ValueError,
        match=r"max_pool2d_with_argmax: `implementation` must be None, 'xla' or "
        r"'pallas', got 'triton'",
    ):
        jaxpool.max_pool2d_with_argmax(x, 2, implementation="triton")
