"""max_unpool{1,2,3}d: against the oracle and torch, its gradient, bad indices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import UNPOOLS
from helpers import (
    assert_same,
    cotangent,
    from_torch,
    make_input,
    require,
    rng_for,
    to_torch,
)
from jax.experimental import checkify
from jax.test_util import check_grads

import jaxpool
from jaxpool import reference

# The CPU's forms alone: these tests check the CPU's numbers; the other
# platforms' forms are traced and run in their own tests (tests/conftest.py).
pytestmark = pytest.mark.forms("cpu")

POOL = {
    1: jaxpool.max_pool1d_with_argmax,
    2: jaxpool.max_pool2d_with_argmax,
    3: jaxpool.max_pool3d_with_argmax,
}
UNPOOL = {1: jaxpool.max_unpool1d, 2: jaxpool.max_unpool2d, 3: jaxpool.max_unpool3d}

CASES = UNPOOLS
IDS = [f"{nd}d-{shape}-{kw}" for nd, shape, kw in CASES]


def _window(kwargs):
    """The pool's ``(kernel_size, stride, padding)``: the unpool's arguments."""
    return kwargs["kernel_size"], kwargs.get("stride"), kwargs.get("padding", 0)


def _torch_unpool(torch, nd, values, indices, kwargs, spatial):
    unpool = getattr(torch.nn.functional, f"max_unpool{nd}d")
    return unpool(
        values,
        torch.from_numpy(np.asarray(indices, np.int64)),
        *_window(kwargs),
        output_size=spatial,
    )


def _pooled(nd, shape, kwargs, kind="ties"):
    x = make_input(rng_for(nd, shape, kind), shape, "float32", kind)
    values, indices = POOL[nd](x, **kwargs)
    return x, values, indices


@pytest.mark.parametrize("nd, shape, kwargs", CASES, ids=IDS)
def test_unpool_matches_oracle_and_torch(nd, shape, kwargs):
    torch = require("torch")
    x, values, indices = _pooled(nd, shape, kwargs)
    spatial = shape[-nd:]
    # PyTorch's call: the pool's window arguments, and the size to restore.
    out = UNPOOL[nd](values, indices, *_window(kwargs), output_size=spatial)
    assert_same(out, reference.max_unpool(np.asarray(values), indices, spatial))
    want = _torch_unpool(
        torch, nd, to_torch(torch, np.asarray(values)), indices, kwargs, spatial
    )
    assert_same(out, from_torch(torch, want))
    # The full shape is accepted too (PyTorch's form), jitted as well, and the
    # output size alone, without the window.
    full = jax.jit(
        lambda v, i: UNPOOL[nd](v, i, *_window(kwargs), output_size=x.shape)
    )(values, indices)
    assert_same(full, out)
    assert_same(UNPOOL[nd](values, indices, output_size=spatial), out)


@pytest.mark.parametrize("nd, shape, kwargs", CASES, ids=IDS)
def test_unpool_gradient_is_torchs_gather(nd, shape, kwargs):
    torch = require("torch")
    _, values, indices = _pooled(nd, shape, kwargs)
    spatial = shape[-nd:]
    out, vjp = jax.vjp(
        lambda v: UNPOOL[nd](v, indices, *_window(kwargs), output_size=spatial), values
    )
    ct = cotangent(rng_for("ct", nd, shape), out.shape, "float32")
    (grad,) = vjp(jnp.asarray(ct))
    vt = to_torch(torch, np.asarray(values)).requires_grad_(True)
    yt = _torch_unpool(torch, nd, vt, indices, kwargs, spatial)
    yt.backward(to_torch(torch, ct))
    assert_same(grad, from_torch(torch, vt.grad))
    # Plain gather semantics, stated directly as well.
    flat = ct.reshape(*ct.shape[: ct.ndim - nd], -1)
    want = np.take_along_axis(
        flat, np.asarray(indices).reshape(*indices.shape[: indices.ndim - nd], -1), -1
    )
    assert_same(grad, want.reshape(values.shape))


def test_unpool_is_differentiable_twice():
    _, values, indices = _pooled(2, (1, 2, 6, 6), dict(kernel_size=2), "random")
    check_grads(
        lambda v: jaxpool.max_unpool2d(v, indices, 2) ** 2,
        (values,),
        order=2,
        modes=["rev"],
    )


def test_unpool_channels_last():
    _, values, indices = _pooled(3, (2, 3, 6, 4, 5), dict(kernel_size=2))
    out = jaxpool.max_unpool3d(values, indices, 2, output_size=(6, 4, 5))
    move = lambda a: jnp.moveaxis(a, 1, -1)  # noqa: E731
    outl, vjp = jax.vjp(
        lambda v: jaxpool.max_unpool3d(
            v, move(indices), 2, output_size=(6, 4, 5), channels_last=True
        ),
        move(values),
    )
    assert_same(outl, move(out))
    (grad,) = vjp(move(out))
    assert_same(grad, move(values))  # unpool then gather gives the values back


def test_segnet_round_trip_keeps_the_maxima():
    """pool -> unpool -> pool gives the same values: what SegNet relies on."""
    x = make_input(rng_for("segnet"), (2, 4, 8, 8), "float32", "random")
    values, indices = jaxpool.max_pool2d_with_argmax(x, 2)
    up = jaxpool.max_unpool2d(values, indices, 2)
    again, again_indices = jaxpool.max_pool2d_with_argmax(up, 2)
    # Zeros can beat negative maxima, so compare where the maximum is >= 0.
    keep = np.asarray(values) >= 0
    assert_same(np.asarray(again)[keep], np.asarray(values)[keep])
    assert_same(np.asarray(again_indices)[keep], np.asarray(indices)[keep])


@pytest.mark.parametrize("nd, shape, kwargs", CASES, ids=IDS)
def test_default_output_size_is_torchs(nd, shape, kwargs):
    """Without ``output_size``, PyTorch's ``(in - 1) * stride + kernel_size - 2
    * padding`` per axis: torch's shape and values."""
    torch = require("torch")
    _, values, indices = _pooled(nd, shape, kwargs)
    k, s, p = _window(kwargs)
    size = tuple((n - 1) * (s or k) + k - 2 * p for n in values.shape[-nd:])
    out = UNPOOL[nd](values, indices, k, s, p)
    assert out.shape == (*values.shape[:-nd], *size)
    assert_same(out, reference.max_unpool(np.asarray(values), indices, size))
    want = _torch_unpool(
        torch, nd, to_torch(torch, np.asarray(values)), indices, kwargs, None
    )
    assert_same(out, from_torch(torch, want))


def test_whole_shape_output_size_in_either_layout():
    """A whole shape (PyTorch's ``output_size=x.size()``) in ``x``'s layout,
    batched or not, restores the same array as the spatial sizes alone."""
    x = make_input(rng_for("whole-shape"), (2, 3, 8, 7), "float32", "random")
    values, indices = jaxpool.max_pool2d_with_argmax(x, 2)
    out = jaxpool.max_unpool2d(values, indices, 2, output_size=(8, 7))
    assert_same(jaxpool.max_unpool2d(values, indices, 2, output_size=x.shape), out)
    assert_same(
        jaxpool.max_unpool2d(values[0], indices[0], 2, output_size=x.shape[1:]), out[0]
    )
    move = lambda a: jnp.moveaxis(a, 1, -1)  # noqa: E731
    nhwc = jaxpool.max_unpool2d(
        move(values), move(indices), 2, output_size=(2, 8, 7, 3), channels_last=True
    )
    assert_same(nhwc, move(out))
    # The NCHW shape for NHWC data is an error (it was a (2, 3, 8, 3) result).
    with pytest.raises(ValueError, match=r"channels-first layout: check `channels_l"):
        jaxpool.max_unpool2d(
            move(values), move(indices), 2, output_size=x.shape, channels_last=True
        )


def _one_device_mesh():
    return jax.set_mesh(jax.make_mesh((1,), ("batch",), devices=jax.devices()[:1]))


@pytest.mark.parametrize("window", [(2, 2, 0), (3, 2, 1)], ids=["k2 s2", "k3 s2 p1"])
def test_under_a_mesh_each_value_lands_in_its_window(window):
    """Under a mesh, given the pool's windows, the unpool places each value
    within its own window (what XLA's partitioner splits with halos): the
    pool's indices land as the scatter lands them, and so does the
    gradient; an index outside its window is dropped there, and the checked
    mode names it."""
    k, s, p = window
    x = make_input(np.random.default_rng(8), (2, 3, 10, 9), "float32", "ties")
    values, indices = jaxpool.max_pool2d_with_argmax(x, k, s, p)

    def unpool(v, i, **kw):
        return jaxpool.max_unpool2d(v, i, k, s, p, output_size=(10, 9), **kw)

    want = unpool(values, indices)
    want_grad = jax.grad(lambda v: jnp.sum(unpool(v, indices) ** 2))(values)
    with _one_device_mesh():
        assert_same(jax.jit(unpool)(values, indices), want)
        grad = jax.jit(jax.grad(lambda v: jnp.sum(unpool(v, indices) ** 2)))(values)
        assert_same(grad, want_grad)
        outside = np.asarray(indices).copy()
        outside[0, 0, 0, 0] = 9 * 9  # in the plane, not in window (0, 0)
        assert jax.jit(unpool)(values, outside)[0, 0, 9, 0] == 0  # dropped
        checked = checkify.checkify(
            jax.jit(lambda v, i: unpool(v, i, check_indices=True))
        )
        err, _ = checked(values, outside)
        with pytest.raises(
            checkify.JaxRuntimeError,
            match=r"81 at position \[0 0 0 0\], outside its window",
        ):
            err.throw()
    assert unpool(values, outside)[0, 0, 9, 0] == values[0, 0, 0, 0]  # no mesh: placed
