"""fractional_max_pool{2,3}d, what is its own: PyTorch's window starts in every
dtype (against the NumPy oracle and torch's kernels), its layouts and output
ratios, its deterministic backwards, its row picks, its samples and keys.
(The oracle grids: test_oracle.py; torch's: test_torch.py; errors, layers and
transformations: test_errors.py, test_modules.py, test_transforms.py.)"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import DTYPES, FRACTIONAL_WINDOWS
from helpers import (
    assert_same,
    cotangent,
    fractional_oracle,
    fractional_samples,
    make_input,
    np_dtype,
    platform_forms,
    precision,
    require,
    rng_for,
    to_torch,
    torch_fractional_pool,
)

import jaxpool
from jaxpool import _fractional, reference

POOL = {2: jaxpool.fractional_max_pool2d, 3: jaxpool.fractional_max_pool3d}
BACKWARD = {
    2: jaxpool.fractional_max_pool2d_backward,
    3: jaxpool.fractional_max_pool3d_backward,
}


@pytest.fixture(scope="module")
def torch():
    return require("torch")


def unit_values(dtype: str) -> np.ndarray:
    """Every value of a 16-bit dtype in [0, 1)."""
    top = 0x3C00 if dtype == "float16" else 0x3F80  # the bits of 1.0
    return np.arange(top, dtype=np.uint16).view(np_dtype(dtype))


def critical_samples(dtype: str, size: int, out: int, k: int) -> np.ndarray:
    """Samples at and next to the points where ``(i + u) * alpha`` crosses an
    integer: the rounding boundaries of the window formula."""
    dt = np_dtype(dtype)
    alpha = float(size - k) / (out - 1)
    points = [
        (n / alpha - i)
        for i in range(out - 1)
        for n in range(int(i * alpha), int((i + 1) * alpha) + 2)
    ]
    points = np.array([p for p in points if 0 <= p < 1], dt)
    near = [points, np.nextafter(points, dt.type(0)), np.nextafter(points, dt.type(1))]
    near.append(np.array([0, np.nextafter(dt.type(1), dt.type(0))], dt))
    found = np.concatenate(near)
    return found[(found >= 0) & (found < 1)]


# ------------------------------------------------------------------ windows

# (size, out, kernel): the last rows give repeated starts in bfloat16 (and
# float16 past 2048), where more than `kernel` windows cover a position.
WINDOWS = FRACTIONAL_WINDOWS


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("size, out, k", WINDOWS)
def test_16bit_starts_equal_the_oracle_for_every_sample(dtype, size, out, k):
    u = unit_values(dtype)
    got = jax.jit(_fractional.window_starts, static_argnums=(1, 2, 3))(
        jnp.asarray(u)[:, None], size, out, k
    )
    want = reference.fractional_starts(u[:, None], size, out, k)
    np.testing.assert_array_equal(np.asarray(got), want)
    # Not float32 arithmetic: rounding to the dtype changes some windows.
    wide = reference.fractional_starts(u[:, None].astype(np.float32), size, out, k)
    assert out == 1 or (wide != want).any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size, out, k", [*WINDOWS, (999, 997, 2), (1000, 700, 1)])
def test_wide_starts_equal_the_oracle_at_rounding_boundaries(dtype, size, out, k):
    rng = rng_for("starts", dtype, size, out, k)
    u = rng.random(500).astype(np_dtype(dtype))
    if out > 1:
        u = np.concatenate([u, critical_samples(dtype, size, out, k)])
    with precision(dtype):
        got = _fractional.window_starts(jnp.asarray(u)[:, None], size, out, k)
    want = reference.fractional_starts(u[:, None], size, out, k)
    np.testing.assert_array_equal(np.asarray(got), want)


def torch_starts(torch, samples, dtype, size, out, k):
    """PyTorch's starts along W, read from the indices of an all-zero input
    (ties: the first element of each window)."""
    zeros = torch.zeros(1, len(samples), 1, size, dtype=to_torch(torch, samples).dtype)
    rows = np.stack([samples, np.zeros_like(samples)], -1)[None]  # entry 0: W
    _, indices = torch.nn.functional.fractional_max_pool2d(
        zeros,
        (1, k),
        (1, out),
        return_indices=True,
        _random_samples=to_torch(torch, rows),
    )
    return indices.numpy()[0, :, 0, :]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size, out, k", WINDOWS)
def test_oracle_starts_equal_torch(torch, dtype, size, out, k):
    """The oracle's arithmetic is PyTorch's, at every 16-bit sample and at the
    rounding boundaries of the wider dtypes."""
    if dtype in ("float16", "bfloat16"):
        u = unit_values(dtype)
    else:
        u = rng_for("torch-starts", dtype).random(300).astype(np_dtype(dtype))
        if out > 1:
            u = np.concatenate([u, critical_samples(dtype, size, out, k)])
    want = torch_starts(torch, u, dtype, size, out, k)
    np.testing.assert_array_equal(reference.fractional_starts(u, size, out, k), want)


@pytest.mark.full  # the oracle's starts for every bfloat16 sample: 20 s
def test_repeated_16bit_starts_cover_more_windows_than_the_kernel():
    """Why the deterministic backward cannot bound the covering windows by
    ``kernel_size``: in bfloat16, ``300 -> 290`` with ``k = 2`` repeats starts."""
    starts = reference.fractional_starts(unit_values("bfloat16"), 300, 290, 2)
    covering = (starts[..., None] <= np.arange(300)) & (
        np.arange(300) < starts[..., None] + 2
    )
    assert covering.sum(-2).max() > 2


def test_starts_past_the_last_are_clipped_where_torch_fails_its_assertion(torch):
    """bfloat16 ``898 -> 894``, ``k = 2``, ``u = 0``: the rounded formula puts
    window 892 at 900 > 896; PyTorch's CPU kernel fails an internal assertion
    there, jaxpool (and the oracle) clip the start to ``L - k``."""
    u = np.zeros((1, 1, 2), np_dtype("bfloat16"))
    x = make_input(rng_for("clip"), (1, 1, 1, 898), "bfloat16", "random")
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT FAILED"):
        torch_fractional_pool(torch, 2, to_torch(torch, x), (1, 2), (1, 894), u)
    starts = reference.fractional_starts(u[0, :, 0], 898, 894, 2)
    assert starts.max() == 896 and (starts[0, -3:] == 896).all()
    got = jaxpool.fractional_max_pool2d(x, (1, 2), (1, 894), samples=u)
    want = fractional_oracle(x, (1, 2), u, (1, 894))
    assert_same(got[0], want[0])
    assert_same(got[1], want[1])


# ------------------------------------------------------------------ oracle


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_channels_last_and_ratio_forms_equal_the_channels_first_op(dtype):
    rng = rng_for("layouts", dtype)
    x = make_input(rng, (2, 3, 10, 11), dtype, "ties")
    samples = fractional_samples(rng, x.shape, 2, dtype)
    want = jaxpool.fractional_max_pool2d(x, 2, (5, 5), samples=samples)
    cl = jaxpool.fractional_max_pool2d(
        np.moveaxis(x, 1, -1), 2, (5, 5), samples=samples, channels_last=True
    )
    for got, expected in zip(cl, want, strict=True):
        assert_same(np.moveaxis(np.asarray(got), -1, 1), expected)
    ratio = jaxpool.fractional_max_pool2d(x, 2, output_ratio=0.5, samples=samples)
    assert_same(ratio[1], want[1])  # int(10 * 0.5) = 5 = int(11 * 0.5)
    g = cotangent(rng, cl[0].shape, dtype)
    grad = jaxpool.fractional_max_pool2d_backward(
        g, np.moveaxis(x, 1, -1), cl[1], channels_last=True
    )
    want_grad = jaxpool.fractional_max_pool2d_backward(
        np.moveaxis(g, -1, 1), x, want[1]
    )
    assert_same(np.moveaxis(np.asarray(grad), -1, 1), want_grad)


# ----------------------------------------------------- backward and keys


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_gather_backward_equals_the_scatter_where_starts_repeat(dtype):
    """bfloat16 ``300 -> 290``: positions covered by more windows than the
    kernel, and any in-plane index (not only each window's own) honoured."""
    rng = rng_for("repeats", dtype)
    x = make_input(rng, (2, 3, 4, 300), dtype, "ties")
    samples = fractional_samples(rng, x.shape, 2, dtype)
    _, indices = jaxpool.fractional_max_pool2d(x, 2, (3, 290), samples=samples)
    g = cotangent(rng, indices.shape, dtype)
    scatter = jaxpool.fractional_max_pool2d_backward(g, x, indices, algorithm="scatter")
    gather = jaxpool.fractional_max_pool2d_backward(g, x, indices, algorithm="gather")
    assert_same(gather, scatter)
    shuffled = np.asarray(indices).copy()
    rng.shuffle(shuffled.reshape(-1))  # indices from anywhere, even other planes'
    shuffled.reshape(-1)[:7] = [-1, 1200, 5, 5, 5, 2**30, -(2**30)]  # some dropped
    want = reference.scatter_add(g, shuffled, x.shape[2:]).astype(np_dtype(dtype))
    for algorithm in ("scatter", "gather"):
        got = jaxpool.fractional_max_pool2d_backward(
            g, x, shuffled, algorithm=algorithm
        )
        assert_same(got, want, algorithm)


# (nd, shape, kernel, output_size, channels_last, dtype, samples): bfloat16 and
# float16 windows that start at the same position (more than the kernel cover
# an element), channels-last, and samples out of [0, 1), whose starts clip.
WILD = [[[np.nan, -5.0], [np.inf, 1e30]], [[-np.inf, -1e30], [3.0, -0.7]]]
SPREAD_CASES = {
    "bfloat16 repeats": (2, (2, 3, 20, 300), 3, (17, 290), False, "bfloat16", None),
    "float16 repeats": (2, (1, 2, 5, 2100), 2, (3, 2090), False, "float16", None),
    "3-d channels-last": (3, (2, 9, 8, 7, 3), (2, 3, 2), (4, 5, 3), True, "float32",
                          None),
    "wild samples": (2, (2, 2, 12, 13), 2, (6, 5), False, "float32", WILD),
}  # fmt: skip


@pytest.mark.parametrize("forms", ["cpu", pytest.param("tpu", marks=pytest.mark.full)])
@pytest.mark.parametrize("case", SPREAD_CASES)
def test_vjp_gather_spreads_onto_every_window_and_equals_the_scatter(case, forms):
    """The VJP's deterministic gather (its gradients spread onto the stride-1
    pool's windows, then that pool's covering sum: the CPU's, and the TPU's
    dense one) equals the scatter, bit for bit with small-integer gradients."""
    nd, shape, kernel, out, channels_last, dtype, samples = SPREAD_CASES[case]
    rng = rng_for("spread", case)
    x = make_input(rng, shape, dtype, "ties")
    planes = (shape[0], shape[-1] if channels_last else shape[1])
    if samples is None:
        samples = rng.random((*planes, nd))
    samples = np.asarray(samples, np_dtype(dtype))
    pool = partial(
        POOL[nd], kernel_size=kernel, output_size=out, samples=samples,
        channels_last=channels_last,
    )  # fmt: skip
    _, indices = pool(x)
    g = cotangent(rng, indices.shape, dtype)
    want = BACKWARD[nd](g, x, indices, channels_last=channels_last, algorithm="scatter")

    def loss(x):
        values, _ = pool(x, algorithm="gather")
        return jnp.sum(values.astype(jnp.float32) * g.astype(np.float32))

    with platform_forms(forms):
        got = jax.jit(jax.grad(loss))(jnp.asarray(x))
    assert_same(got, want)


@pytest.mark.parametrize(
    "dtype", ["float16", "bfloat16", "float32", "float64", "int32"]
)
@pytest.mark.parametrize("axis", [0, 1])
def test_matmul_rows_keeps_every_bit(dtype, axis):
    """The TPU's pick of rows by one-hot int8 matmuls is the gather's, bit for
    bit (random bit patterns: NaN payloads, signed zeros, infinities,
    subnormals); a row outside the axis picks zero bits."""
    name, dtype = dtype, np_dtype(dtype)
    width = np.dtype(dtype).itemsize
    rng = rng_for("matmul-rows", name, axis)
    plane = rng.integers(0, 256, (6, 7 * width), dtype=np.uint8).view(dtype)
    rows = np.array([0, 3, 3, 1, 5, 0, 2], np.int32)[: plane.shape[axis]]
    with precision(name):
        got = _fractional.matmul_rows(jnp.asarray(plane), jnp.asarray(rows), axis)
        want = _fractional.take_rows(jnp.asarray(plane), jnp.asarray(rows), axis)
        outside = _fractional.matmul_rows(
            jnp.asarray(plane), jnp.asarray([-1, 9]), axis
        )
    unsigned = f"u{width}"
    assert got.dtype == dtype
    assert (
        np.asarray(got).view(unsigned).tolist()
        == np.asarray(want).view(unsigned).tolist()
    )
    assert not np.asarray(outside).view(unsigned).any()


def test_key_draws_uniform_samples_and_vmap_over_keys():
    x = make_input(rng_for("keys"), (2, 3, 12, 12), "float32", "random")
    keys = jax.random.split(jax.random.key(0), 4)
    pool = partial(jaxpool.fractional_max_pool2d, x, 3, output_ratio=0.5)
    values, indices = jax.vmap(lambda k: pool(key=k))(keys)
    assert values.shape == (4, 2, 3, 6, 6)
    for k, v, i in zip(keys, values, indices, strict=True):
        samples = jax.random.uniform(k, (2, 3, 2), jnp.float32)
        want = pool(samples=samples)
        assert_same(v, want[0])
        assert_same(i, want[1])
    assert len({np.asarray(i).tobytes() for i in indices}) == 4  # independent
    # Unbatched: (C, 2) samples from the key, the same numbers as the batch's.
    one = jaxpool.fractional_max_pool2d(x[0], 3, 6, key=keys[0])
    samples = jax.random.uniform(keys[0], (1, 3, 2))
    assert_same(
        one[1], jaxpool.fractional_max_pool2d(x[:1], 3, 6, samples=samples)[1][0]
    )


def test_vmap_over_unbatched_inputs_and_samples_is_the_batched_op():
    """Unbatched inputs take ``(C, nd)`` samples, so ``vmap`` over a batch of
    inputs and samples, under ``jit``, is the batched call."""
    rng = rng_for("vmap-samples")
    x = make_input(rng, (4, 2, 7, 8, 9), "float32", "ties")
    samples = rng.random((4, 2, 3)).astype(np.float32)

    def pool(x, samples):
        return jaxpool.fractional_max_pool3d(x, (2, 3, 2), (3, 4, 5), samples=samples)

    got = jax.jit(jax.vmap(pool))(x, samples)
    want = pool(x, samples)
    assert_same(got[0], want[0])
    assert_same(got[1], want[1])


def test_auto_backward_is_the_scatter_on_cpu_and_the_gather_elsewhere():
    """Lowered for each platform from this CPU machine: the accelerators'
    program has the deterministic gather, with neither a scatter nor a sort
    (its gradients spread onto the stride-1 pool's windows)."""
    x = jnp.zeros((2, 3, 9, 10))

    def loss(x):
        values, _ = jaxpool.fractional_max_pool2d(x, 2, (5, 4), key=jax.random.key(0))
        return values.sum()

    grad = jax.jit(jax.grad(loss))
    for platform, scatter in (("cpu", True), ("cuda", False), ("tpu", False)):
        text = grad.trace(x).lower(lowering_platforms=(platform,)).as_text()
        assert ("stablehlo.scatter" in text) == scatter, platform
        assert "stablehlo.sort" not in text, platform
    exported = jax.export.export(grad, platforms=("cpu", "cuda", "tpu"))(x)
    assert_same(exported.call(x), grad(x))


def test_pytorch_sample_forms_are_accepted():
    """PyTorch's ``N' >= N`` rows (the first used) and, unbatched, ``(1, C,
    nd)``, besides ``(C, nd)``."""
    rng = rng_for("forms")
    x = make_input(rng, (2, 3, 7, 8, 9), "float32", "random")
    samples = rng.random((4, 3, 3)).astype(np.float32)
    want = jaxpool.fractional_max_pool3d(x, 2, 3, samples=samples[:2])
    assert_same(jaxpool.fractional_max_pool3d(x, 2, 3, samples=samples)[1], want[1])
    one = jaxpool.fractional_max_pool3d(x[1], 2, 3, samples=samples[1:2])
    assert_same(one[1], want[1][1])
    assert_same(
        jaxpool.fractional_max_pool3d(x[1], 2, 3, samples=samples[1])[1], one[1]
    )
