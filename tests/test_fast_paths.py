"""The CPU fast paths equal the forms they replace, bit for bit.

On CPU the forward splits a strided minor axis into phases, the scatter runs
over the whole array flattened, and ``materialize`` keeps XLA from recomputing
the forward inside the backward. Accelerators, meshes and int32-overflowing
arrays take the other forms, which these tests also run on CPU, against the
oracle and against each other. The platform seam (``_platform``) picks them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same, cotangent, make_planes, np_dtype, rng_for
from jax.sharding import AxisType

import jaxpool
from jaxpool import _planes, _policy, _scan, reference
from jaxpool._args import PoolArgs
from jaxpool._fusion import materialize
from jaxpool._spec import pool_spec


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8", "bool"])
@pytest.mark.parametrize("first", [3, 0], ids=["sentinel-first", "other-first"])
def test_materialize_returns_its_input(dtype, first):
    """Whatever the trip count (1 when the first element is the loop's sentinel
    3), the result is the input, bit for bit: -0.0, NaN, the sentinel itself."""
    values = [first, 3, -0.0, 0.0, np.nan, np.inf, 2.5, 1]
    if dtype == "bool":
        x = np.array([first, 3, 0, 1, 1, 0, 1, 1], bool)
    elif np.issubdtype(np_dtype(dtype), np.integer):
        x = np.array([first, 3, 0, 7, 255 if dtype == "uint8" else -5, 1, 2, 3])
        x = x.astype(np_dtype(dtype))
    else:
        x = np.array(values, np_dtype(dtype))
    got = jax.jit(materialize)(x)
    assert got.dtype == x.dtype
    assert np.asarray(got).tobytes() == x.tobytes()
    source = np.full(3, first, np.float32)
    got = jax.jit(lambda x, s: materialize(x, s))(x, source)
    assert np.asarray(got).tobytes() == x.tobytes()


def test_materialize_is_a_loop_on_cpu_only_without_a_mesh():
    """On CPU the forward's passes are computed into their own buffers before a
    ``while`` (XLA:CPU drops ``optimization_barrier``); the platform seam adds
    none under a mesh, nor for an accelerator."""
    x = jnp.arange(64.0).reshape(1, 1, 8, 8)

    def lowered(platform):
        f = jax.jit(lambda x: jaxpool.max_pool2d_with_argmax(x, 3, 1)[1])
        return f.trace(x).lower(lowering_platforms=(platform,)).as_text()

    assert "stablehlo.while" in lowered("cpu")
    assert "stablehlo.while" not in lowered("cuda")
    mesh = jax.make_mesh((1,), ("n",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        assert "stablehlo.while" not in lowered("cpu")


def test_train_step_reads_the_forward_once():
    """The indices are computed once, then scattered: the train step has the
    loop that keeps the scan out of the backward's loops (30x slower there)."""
    x = jax.ShapeDtypeStruct((1, 2, 8, 8, 8), jnp.float32)
    w = jax.ShapeDtypeStruct((1, 2, 4, 4, 4), jnp.float32)
    for algorithm in ("scatter", "gather"):
        step = jax.jit(
            jax.grad(
                lambda x, w, a=algorithm: jnp.sum(
                    w * jaxpool.max_pool3d_with_argmax(x, 2, algorithm=a)[0]
                )
            )
        )
        hlo = step.lower(x, w).compile().as_text()
        assert jax.default_backend() != "cpu" or " while(" in hlo, algorithm


def _case(name, config, shape):
    """Input (every kind in its planes), spec and oracle ``(values, indices)``
    of a 3-D pool config ``(kernel, stride, padding, dilation, ceil_mode)``."""
    x = make_planes(rng_for(name, str(config)), shape, "float32")
    spec = pool_spec("f", 3, x.shape, PoolArgs(*config))
    axes = spec.axes
    kernel = tuple(w.taps for w in axes)
    stride = tuple(w.stride for w in axes)
    dilation = tuple(w.dilation for w in axes)
    padding = tuple(-w.offset for w in axes)  # the configs pad symmetrically
    ceil_mode = config[4]
    want = reference.max_pool(x, kernel, stride, padding, dilation, ceil_mode)
    return x, spec, want


# (kernel, stride, padding, dilation, ceil_mode) with overlapping strided
# windows along W, which the forward splits into phases on CPU.
PHASED = [
    ((3, 3, 3), 2, 1, 1, False),
    ((2, 3, 4), (1, 2, 3), (1, 1, 2), 1, True),
    ((1, 2, 3), (2, 1, 2), 0, (1, 1, 2), False),
    ((3, 2, 4), (3, 2, 2), (1, 0, 2), (2, 1, 1), True),
]


@pytest.mark.parametrize("config", PHASED, ids=str)
def test_phased_and_plain_scans_equal_the_oracle(config):
    """The CPU scan (phases) and the accelerators' scan (strided taps), both
    run here on CPU, give the oracle's values and indices."""
    x, spec, want = _case("phased", config, (2, 3, 9, 8, 11))
    assert _scan.splits_phases(spec.axes, 0)
    for phased in (True, False):
        form = _scan.ScanForm(materialize=phased, phases=phased, read_back=True)
        values, indices = jax.jit(
            lambda x, form=form: _scan.window_argmax(x, spec, form)
        )(x)
        assert_same(indices, want[1], f"indices, phased={phased}")
        assert_same(values, want[0], f"values, phased={phased}")


# Axis-at-a-time passes (more than 27 taps): D first, so later passes compare
# positions; padding rows of -inf must never win a tie with a real -inf.
STAGED = [
    ((4, 4, 4), 2, 2, 1, False),
    ((3, 4, 3), (1, 2, 3), (1, 2, 1), (2, 1, 2), True),
    ((5, 2, 3), (3, 1, 2), (2, 1, 0), 1, True),
]


@pytest.mark.parametrize("config", STAGED, ids=str)
def test_axis_passes_keep_the_scan_order(config):
    x, spec, want = _case("staged", config, (1, 3, 11, 9, 10))
    assert len(_scan.stages(spec.axes)) == 3
    values, indices = jaxpool.max_pool3d_with_argmax(x, *config)
    assert_same(indices, want[1], "indices")
    assert_same(values, want[0], "values")


def _hostile(shape, plane, dtype):
    """Distinct indices into each plane of ``plane`` elements, with ``plane``,
    the dtype's maximum and (if signed) -1 planted."""
    rng = rng_for("flat", str(shape), str(dtype))
    per_plane = int(np.prod(shape[2:]))
    rows = [rng.permutation(plane)[:per_plane] for _ in range(shape[0] * shape[1])]
    indices = np.stack(rows).reshape(shape).astype(dtype)
    flat = indices.reshape(-1)
    flat[0] = plane  # the next plane's first element, if flattened naively
    flat[-1] = np.iinfo(dtype).max
    if np.issubdtype(dtype, np.signedinteger):
        flat[len(flat) // 2] = -1  # would wrap onto the plane's last element
    return indices


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int8, np.uint8, np.uint16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_flat_and_batched_scatters_equal_the_oracle(
    monkeypatch, retrace, dtype, index_dtype, channels_last
):
    """The CPU scatter over the whole array (global offsets computed from the
    per-plane ones) and the batched one (meshes, accelerators, past int32)
    drop the same bad indices and place or sum the rest exactly."""
    out = (2, 3, 4, 5)  # into planes of 5 x 6 = 30 elements
    indices = _hostile(out, 30, index_dtype)
    g = cotangent(rng_for("flat-g", dtype), out, dtype)
    summed = reference.scatter_add(g.astype(np.float64), indices, (5, 6))
    want = summed.astype(np_dtype(dtype)), reference.max_unpool(g, indices, (5, 6))
    # Windows of 2x2 at stride 1 overlap, so distinct indices are valid ones.
    if channels_last:
        g, indices = np.moveaxis(g, 1, -1), np.moveaxis(indices, 1, -1)
        want = tuple(np.moveaxis(w, 1, -1) for w in want)
    x = jax.ShapeDtypeStruct(want[0].shape, np_dtype(dtype))

    @jax.jit
    def ops(g, i):
        grad = jaxpool.max_pool2d_with_argmax_backward(
            g, x, i, (2, 2), 1, channels_last=channels_last
        )
        return grad, jaxpool.max_unpool2d(
            g, i, output_size=(5, 6), channels_last=channels_last
        )

    traced = []  # which form each trace builds (the ops are jitted and cached)
    offsets = _planes._global_offsets
    monkeypatch.setattr(
        _planes, "_global_offsets", lambda *a: traced.append(1) or offsets(*a)
    )
    flat = ops(g, indices)
    assert traced, "the flat form was not built"
    traced.clear()
    monkeypatch.setattr(_policy, "INT32_MAX", 0)
    jax.clear_caches()
    batched = jax.jit(ops.__wrapped__)(g, indices)
    assert not traced, "the batched run built the flat form"
    for path, got in {"flat": flat, "batched": batched}.items():
        assert_same(got[0], want[0], f"{path} backward")
        assert_same(got[1], want[1], f"{path} unpool")


def test_flat_form_is_chosen_only_below_the_limit(monkeypatch, retrace):
    """The seam picks the flat scatter only while every offset into the whole
    array, and the out-of-bounds one, fits int32 (here lowered to 64)."""
    monkeypatch.setattr(_policy, "INT32_MAX", 64)
    built = []
    scatter = _planes.scatter
    monkeypatch.setattr(
        _planes,
        "scatter",
        lambda *a, **kw: built.append(kw["flat"]) or scatter(*a, **kw),
    )

    def forms(shape):
        """The forms built when the program is lowered for every platform
        (each is traced only then: ``_lazy``)."""
        built.clear()
        g = jnp.zeros((*shape[:2], shape[2] - 1, shape[3] - 1))
        x = jax.ShapeDtypeStruct(shape, jnp.float32)
        jax.export.export(
            jax.jit(
                lambda g: jaxpool.max_pool2d_with_argmax_backward(
                    g, x, g.astype(jnp.int32), 2, 1
                )
            ),
            platforms=["cpu", "tpu", "cuda"],
            disabled_checks=[jax.export.DisabledSafetyCheck.platform()],
        )(g)
        return set(built)

    assert forms((2, 2, 3, 3)) == {True, False}  # 36 elements: flat on CPU
    assert forms((2, 2, 4, 4)) == {False}  # 64
    assert forms((0, 2, 3, 3)) == {False}  # empty
