"""jaxpool.tf against TensorFlow's CPU kernels (tensorflow-cpu==2.21.0) and a
NumPy for-loop of TensorFlow's rule (``helpers.tf_pool_oracle``).

Values and indices bit for bit, the gradient through ``jax.grad`` and the
standalone backward (``MaxPoolGradWithArgmax``), SegNet's ``tf.scatter_nd``
unpooling, under ``jit`` and ``vmap``, in four dtypes. Without TensorFlow
(the quick tier) every test still checks the oracle; under JAXPOOL_NO_SKIP=1
TensorFlow must be there."""

from __future__ import annotations

import importlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import (
    DTYPES,
    INF,
    NAN,
    TF_EDGES,
    TF_POOLS,
    TF_UNPOOLS,
    TF_WINDOWS,
    tf_random_pools,
)
from helpers import (
    assert_same,
    cotangent,
    flat_scatter_add,
    lowered,
    make_planes,
    np_dtype,
    optional,
    precision,
    require,
    rng_for,
    tf_pool_oracle,
)
from jax.experimental import checkify

from jaxpool import tf as jptf

# The CPU's forms alone: these tests check the CPU's numbers; the dialect runs
# the kernels that the other platforms' tests trace (tests/conftest.py).
pytestmark = pytest.mark.forms("cpu")

ROWS = [*TF_POOLS, *tf_random_pools(4, seed=57)]


def _hw(value) -> tuple[int, int]:
    """``(h, w)`` of TensorFlow's window argument forms."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    items = items[1:3] if len(items) == 4 else items
    return (items[0], items[0]) if len(items) == 1 else (items[0], items[1])


def _planes(rng, shape, dtype: str) -> np.ndarray:
    """Every input kind of ``helpers.make_planes`` (random, ties with signed
    zeros, NaN, mostly -inf), then images of NaN, +-inf, +-0.0 and small
    integers together: ``(5 N, H, W, C)``."""
    mixed = rng.choice([NAN, NAN, -INF, -INF, INF, -0.0, 0.0, 1.0, 2.0], shape)
    return np.concatenate(
        [make_planes(rng, shape, dtype), mixed.astype(np_dtype(dtype))]
    )


def _tf_pool(tf, x, g, ksize, strides, padding, include):
    """TensorFlow's values, int64 indices and gradient (GradientTape, with
    ``g`` as the values' cotangent)."""
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        values, indices = tf.nn.max_pool_with_argmax(
            xt, ksize, strides, padding, include_batch_in_index=include
        )
    grad = tape.gradient(values, xt, output_gradients=tf.constant(g))
    return values.numpy(), indices.numpy(), grad.numpy()


# ------------------------------------------------------------- the rule


@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_nan_and_inf_windows(dtype):
    """TF_WINDOWS' windows side by side in one row of 2x2 windows: NaN skipped
    unless first, ties and signed zeros to the first, -inf-only windows."""
    windows = np.array([w for _, w, _, _ in TF_WINDOWS], np.float64)
    r = len(windows)
    x = windows.reshape(r, 2, 2).transpose(1, 0, 2).reshape(1, 2, 2 * r, 1)
    x = x.astype(np_dtype(dtype))
    want = np.array([v for *_, v, _ in TF_WINDOWS]).astype(np_dtype(dtype))
    at = np.array([p for *_, p in TF_WINDOWS])
    want_index = (at // 2) * 2 * r + 2 * np.arange(r) + at % 2
    with precision(dtype):
        values, indices = jptf.max_pool_with_argmax(x, 2, 2, "VALID")
    names = [name for name, *_ in TF_WINDOWS]
    for k, name in enumerate(names):
        assert_same(values.ravel()[k : k + 1], want[k : k + 1], name)
    np.testing.assert_array_equal(np.asarray(indices).ravel(), want_index)
    tf = optional("tensorflow")
    if tf is not None:  # TensorFlow itself chooses the table's elements
        tv, ti = tf.nn.max_pool_with_argmax(x, 2, 2, "VALID")
        assert_same(tv.numpy().ravel(), want, "TensorFlow's values")
        np.testing.assert_array_equal(ti.numpy().ravel(), want_index)


@pytest.mark.parametrize(
    "name, image, ksize, strides, padding, values, indices",
    TF_EDGES,
    ids=[case[0] for case in TF_EDGES],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_same_edge_windows(
    name, image, ksize, strides, padding, values, indices, dtype
):
    x = np.array(image).astype(np_dtype(dtype))[None, :, :, None]
    v, i = jptf.max_pool_with_argmax(x, ksize, strides, padding)
    want = np.array(values).astype(np_dtype(dtype))[None, :, :, None]
    assert_same(v, want, name)
    np.testing.assert_array_equal(np.asarray(i)[0, :, :, 0], indices)
    tf = optional("tensorflow")
    if tf is not None:
        tv, ti = tf.nn.max_pool_with_argmax(x, ksize, strides, padding)
        assert_same(tv.numpy(), want, f"{name}: TensorFlow's values")
        np.testing.assert_array_equal(ti.numpy()[0, :, :, 0], indices)


# ------------------------------------------------- configurations, gradients


def _jaxpool(x, g, row):
    """jaxpool.tf's values, indices, ``jax.vjp`` gradient and standalone
    backward, in one jitted program (``vmap`` over 5 groups of images for
    rows that ask)."""
    _, _, ksize, strides, padding, include, how, algorithm = row
    window = dict(ksize=ksize, strides=strides, padding=padding)

    def run(x, g):
        def pool(x):
            return jptf.max_pool_with_argmax(
                x, **window, include_batch_in_index=include, algorithm=algorithm
            )

        values, vjp, indices = jax.vjp(pool, x, has_aux=True)
        standalone = jptf.max_pool_grad_with_argmax(
            x, g, indices, **window, include_batch_in_index=include
        )
        return values, indices, vjp(g)[0], standalone

    if how == "jit":
        return jax.jit(run)(x, g)
    groups = lambda a: a.reshape(5, -1, *a.shape[1:])  # noqa: E731
    out = jax.jit(jax.vmap(run))(groups(x), groups(g))
    return [a.reshape(-1, *a.shape[2:]) for a in out]


def _row_dtypes(k: int) -> list[tuple[str, tuple]]:
    """Two dtypes a row, every pair in four rows: float32 or bfloat16 in both
    tiers, float16 or float64 in the full one."""
    wide = pytest.mark.full
    return [
        (("float32", "bfloat16")[k % 2], ()),
        (("float16", "float64")[k // 2 % 2], (wide,)),
    ]


@pytest.mark.parametrize(
    "row, dtype",
    [
        pytest.param(row, dtype, marks=marks, id=f"{row[0]}-{dtype}")
        for k, row in enumerate(ROWS)
        for dtype, marks in _row_dtypes(k)
    ],
)
def test_values_indices_and_gradients(row, dtype):
    """Bit for bit: values, indices, the gradient through ``jax.vjp`` (the
    row's backward algorithm) and ``max_pool_grad_with_argmax`` at those
    indices, with small-integer cotangents (their sums are exact in every
    dtype), against the oracle and TensorFlow."""
    name, shape, ksize, strides, padding, include, how, _ = row
    rng = rng_for("tf", name, dtype)
    x = _planes(rng, shape, dtype)
    k, s = _hw(ksize), _hw(strides)
    want_values, want_image = tf_pool_oracle(x, k, s, padding)
    g = cotangent(rng, want_values.shape, dtype)
    with precision(dtype):
        values, indices, grad, standalone = _jaxpool(x, g, row)
    # int64 where JAX holds it (float64 runs with x64), int32 otherwise.
    assert indices.dtype == (np.int64 if dtype == "float64" else np.int32)
    assert_same(values, want_values, "values vs the oracle")
    group = shape[0] if how == "vmap" else x.shape[0]  # vmap: its own batches
    image = np.arange(x.shape[0]).reshape(-1, 1, 1, 1) % group
    want = want_image + image * int(np.prod(shape[1:])) * include
    np.testing.assert_array_equal(np.asarray(indices), want)
    exact = flat_scatter_add(g, want_image, x.shape).astype(x.dtype)
    assert_same(grad, exact, "jax.grad vs an exact scatter")
    assert_same(standalone, exact, "max_pool_grad_with_argmax vs an exact scatter")
    tf = optional("tensorflow")
    if tf is None:
        return
    tf_values, tf_indices, tf_grad = [], [], []
    for start in range(0, x.shape[0], group):
        part = slice(start, start + group)
        v, i, gr = _tf_pool(tf, x[part], g[part], ksize, strides, padding, include)
        tf_values.append(v)
        tf_indices.append(i)
        tf_grad.append(gr)
    assert_same(values, np.concatenate(tf_values), "values vs TensorFlow")
    np.testing.assert_array_equal(np.asarray(indices), np.concatenate(tf_indices))
    assert_same(grad, np.concatenate(tf_grad), "jax.grad vs TensorFlow's")


def test_gradient_within_float32_rounding_of_tensorflow():
    """Normal cotangents, 9 windows on one element (3x3, stride 1): jaxpool's
    sum and TensorFlow's (in flat order) are each within float32's rounding
    of the exact one."""
    rng = rng_for("tf", "rounding")
    x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    x[:, 3, 3, :] = 10.0  # the maximum of every window around it
    _, want = tf_pool_oracle(x, (3, 3), (1, 1), "SAME")
    g = rng.standard_normal(want.shape).astype(np.float32)
    exact = flat_scatter_add(g, want, x.shape)
    bound = 10 * 2.0**-24 * flat_scatter_add(np.abs(g), want, x.shape)

    def grad(x):
        f = lambda x: jnp.vdot(jptf.max_pool_with_argmax(x, 3, 1, "SAME")[0], g)  # noqa: E731
        return jax.grad(f)(x)

    ours = np.asarray(jax.jit(grad)(x), np.float64)
    assert (np.abs(ours - exact) <= bound).all()
    tf = require("tensorflow")
    _, _, theirs = _tf_pool(tf, x, g, 3, 1, "SAME", False)
    assert (np.abs(theirs.astype(np.float64) - exact) <= bound).all()
    assert (np.abs(ours - theirs) <= 2 * bound).all()


@pytest.mark.parametrize(
    "dtype, big, want_tf", [("float16", 2048.0, 2048.0), ("bfloat16", 256.0, 256.0)]
)
def test_16_bit_gradients_add_in_float32(dtype, big, want_tf):
    """Three windows choose one element and their gradients are ``big, 1,
    1``: jaxpool adds in float32 and rounds once (``big + 2``), TensorFlow in
    the 16-bit dtype in flat order (``big``), the difference the docs
    state."""
    x = np.array([0.0, 1.0, 0.0]).astype(np_dtype(dtype)).reshape(1, 1, 3, 1)
    g = np.array([big, 1.0, 1.0]).astype(np_dtype(dtype)).reshape(1, 1, 3, 1)
    window = dict(ksize=[1, 3], strides=1, padding="SAME")
    _, indices = jptf.max_pool_with_argmax(x, **window)
    assert np.asarray(indices).ravel().tolist() == [1, 1, 1]
    grad = jax.grad(lambda x: jnp.vdot(jptf.max_pool_with_argmax(x, **window)[0], g))
    assert float(grad(x)[0, 0, 1, 0]) == big + 2
    standalone = jptf.max_pool_grad_with_argmax(x, g, indices, **window)
    assert float(standalone[0, 0, 1, 0]) == big + 2
    tf = optional("tensorflow")
    if tf is not None:
        _, _, theirs = _tf_pool(tf, x, g, *window.values(), False)
        assert float(theirs[0, 0, 1, 0]) == want_tf


# --------------------------------------------------------------- backward


def test_backward_drops_indices_outside_the_image():
    """TensorFlow adds an index past its image to the next image (or aborts
    the process); jaxpool drops it, and ``check_indices`` reports it."""
    x = jnp.zeros((2, 2, 2, 1))
    g = jnp.array([1.0, 2.0]).reshape(2, 1, 1, 1)
    for argmax, want in [
        ([3, 4], [[0, 0, 0, 1], [0, 0, 0, 0]]),  # 4: image 1's element 0 in TF
        ([-1, 2], [[0, 0, 0, 0], [0, 0, 2, 0]]),  # -1 never wraps around
        ([7, 2**31 - 1], [[0, 0, 0, 0], [0, 0, 0, 0]]),
    ]:
        at = jnp.array(argmax).reshape(2, 1, 1, 1)
        grad = jptf.max_pool_grad_with_argmax(x, g, at, 2, 2, "VALID")
        np.testing.assert_array_equal(np.asarray(grad).reshape(2, 4), want)
    # With the batch in the index, 4 is image 1's element 0.
    at = jnp.array([3, 4]).reshape(2, 1, 1, 1)
    grad = jptf.max_pool_grad_with_argmax(x, g, at, 2, 2, "VALID", True)
    np.testing.assert_array_equal(
        np.asarray(grad).reshape(2, 4), [[0, 0, 0, 1], [2, 0, 0, 0]]
    )

    def checked(at):
        return jptf.max_pool_grad_with_argmax(
            x, g, at, 2, 2, "VALID", check_indices=True
        )

    error, _ = checkify.checkify(jax.jit(checked))(
        jnp.array([3, 4]).reshape(2, 1, 1, 1)
    )
    with pytest.raises(checkify.JaxRuntimeError, match="holds 4 at position"):
        error.throw()


def test_index_dtypes():
    x = np.arange(8.0, dtype=np.float32).reshape(1, 2, 2, 2)

    class TFDType:  # what a tf.DType offers
        as_numpy_dtype = np.int64

    assert jptf.max_pool_with_argmax(x, 2, 2, "VALID")[1].dtype == np.int32
    assert (
        jptf.max_pool_with_argmax(x, 2, 2, "VALID", output_dtype=TFDType())[1].dtype
        == np.int32
    )
    with jax.enable_x64(True):
        _, indices = jptf.max_pool_with_argmax(x, 2, 2, "VALID")
        assert indices.dtype == np.int64 and indices.ravel().tolist() == [6, 7]
        int32 = jptf.max_pool_with_argmax(x, 2, 2, "VALID", output_dtype=np.int32)
        assert int32[1].dtype == np.int32


def test_indices_past_int32_are_an_error_without_x64():
    big = jax.ShapeDtypeStruct((3, 2**15, 2**15, 1), jnp.float32)  # 2**30 an image
    pool = lambda include: (  # noqa: E731
        lambda x: jptf.max_pool_with_argmax(x, 2, 2, "VALID", "NHWC", "int64", include)
    )
    assert jax.eval_shape(pool(False), big)[1].dtype == np.int32
    with pytest.raises(
        ValueError,
        match=r"max_pool_with_argmax: `input` of shape .* "
        r"3221225472 elements in the batch, past int32 indices",
    ):
        jax.eval_shape(pool(True), big)


# ----------------------------------------------------------------- unpool


def _segnet_unpool(tf, values, argmax, shape):
    """The community's and tfa's ``MaxUnpooling2D``, with the original size
    given: batch and channel from each value's position, row and column from
    its index."""
    n, _, w, c = shape
    b = np.broadcast_to(np.arange(n).reshape(-1, 1, 1, 1), argmax.shape)
    f = np.broadcast_to(np.arange(c), argmax.shape)
    y, x = argmax // (w * c), (argmax // c) % w
    where = tf.constant(np.stack([b, y, x, f], -1).reshape(-1, 4))
    return tf.scatter_nd(where, tf.constant(values.reshape(-1)), shape).numpy()


@pytest.mark.parametrize(
    "name, shape, ksize, strides, padding, dtype",
    [
        (*row, dtype)
        for row, dtype in zip(
            TF_UNPOOLS, ["float32", "bfloat16", "float16"], strict=True
        )
    ],
)
def test_unpool_is_segnets_scatter_nd(name, shape, ksize, strides, padding, dtype):
    """Integer inputs (exact sums): the unpool equals a float64 scatter-add at
    the indices and TensorFlow's ``scatter_nd`` unpooling (overlapping
    windows' values summed), with the batch in the index or not; its
    gradient is the cotangent read at each index."""
    rng = rng_for("tf unpool", name, dtype)
    x = rng.integers(-20, 21, shape).astype(np_dtype(dtype))
    values, argmax = jptf.max_pool_with_argmax(x, ksize, strides, padding)
    values, argmax = np.asarray(values), np.asarray(argmax)
    want = flat_scatter_add(values, argmax, shape).astype(x.dtype)
    assert_same(jptf.max_unpool(values, argmax, shape[1:3]), want, name)
    batch = argmax + np.arange(shape[0]).reshape(-1, 1, 1, 1) * int(np.prod(shape[1:]))
    assert_same(jptf.max_unpool(values, batch, shape, True), want, "batch in index")
    ct = rng.integers(-3, 4, shape).astype(x.dtype)
    _, vjp = jax.vjp(lambda v: jptf.max_unpool(v, argmax, shape[1:3]), values)
    read = np.take_along_axis(ct.reshape(shape[0], -1), argmax.reshape(shape[0], -1), 1)
    assert_same(vjp(ct)[0], read.reshape(values.shape), "gradient")
    tf = optional("tensorflow")
    if tf is not None:
        assert_same(_segnet_unpool(tf, values, argmax, shape), want, "scatter_nd")


def test_unpool_drops_indices_outside_the_image():
    values = jnp.array([1.0, 2.0]).reshape(2, 1, 1, 1)
    argmax = jnp.array([4, -1]).reshape(2, 1, 1, 1)
    out = jptf.max_unpool(values, argmax, (2, 2))
    np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 2, 2, 1)))


def test_imports_no_tensorflow(monkeypatch):
    """jaxpool.tf is JAX alone: it imports where TensorFlow cannot be."""
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # its import now fails
    monkeypatch.delitem(sys.modules, "jaxpool.tf")
    module = importlib.import_module("jaxpool.tf")
    values, _ = module.max_pool_with_argmax(np.ones((1, 2, 2, 1)), 2, 2, "VALID")
    assert values.shape == (1, 1, 1, 1)


@pytest.mark.forms(None)  # each platform's own forms, lowered for it
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_lowers_for_accelerators_without_a_gather(platform):
    """The dialect runs the kernels' own forms: lowered for a GPU or a TPU
    (whose forward carries the values through the scan, no read-back), its
    forward holds no gather (the NaN fix reads the first taps by slicing),
    and its gradient lowers too; the CPU's program reads its values back."""
    x = jax.ShapeDtypeStruct((2, 9, 10, 3), jnp.float32)

    def pool(x):
        return jptf.max_pool_with_argmax(x, 3, 2, "SAME")

    assert "stablehlo.gather" not in lowered(pool, (x,), platform)
    assert "stablehlo.gather" in lowered(pool, (x,), "cpu")
    grad = jax.grad(lambda x: pool(x)[0].sum())
    assert "func.func public @main" in lowered(grad, (x,), platform)


@pytest.mark.parametrize("shape", [(0, 4, 5, 2), (2, 4, 5, 0)], ids=["N=0", "C=0"])
def test_empty_batch_or_channels(shape):
    """Empty outputs of the right shapes (TensorFlow rejects empty inputs)."""
    x = np.zeros(shape, np.float32)
    values, indices = jptf.max_pool_with_argmax(
        x, 2, 2, "SAME", include_batch_in_index=True
    )
    assert values.shape == indices.shape == (shape[0], 2, 3, shape[3])
    grad = jptf.max_pool_grad_with_argmax(x, values, indices, 2, 2, "SAME", True)
    assert grad.shape == shape
    assert jptf.max_unpool(values, indices, shape[1:3], True).shape == shape


def test_second_order():
    """The gradient is differentiable (TensorFlow's has no gradient): a
    Hessian-vector product of the pooled values' squares is twice the vector
    at each window's argmax, zero elsewhere."""
    rng = rng_for("tf", "hessian")
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    v = rng.integers(1, 4, x.shape).astype(np.float32)

    def f(x):
        return jnp.sum(jptf.max_pool_with_argmax(x, 2, 2, "VALID")[0] ** 2)

    _, hvp = jax.jvp(jax.grad(f), (x,), (v,))
    _, argmax = tf_pool_oracle(x, (2, 2), (2, 2), "VALID")
    want = np.zeros(x.size, np.float32)
    want[argmax.ravel()] = 2 * v.ravel()[argmax.ravel()]
    np.testing.assert_array_equal(np.asarray(hvp).ravel(), want)
