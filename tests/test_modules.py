"""The Flax NNX, Flax Linen and Equinox layers."""

from __future__ import annotations

import importlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same, make_input, require, rng_for

import jaxpool

X5 = make_input(rng_for("modules"), (2, 6, 7, 5, 3), "float32", "ties")  # N D H W C
X4 = make_input(rng_for("modules-2d"), (2, 8, 9, 3), "float32", "random")  # N H W C


def _functional_pool3d(x, **kw):
    return jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, channels_last=True, **kw)


@pytest.fixture(scope="module")
def nnx():
    return require("flax.nnx") and importlib.import_module("flax.nnx")


@pytest.fixture(scope="module")
def linen():
    return require("flax.linen") and importlib.import_module("flax.linen")


@pytest.fixture(scope="module")
def eqx():
    return require("equinox")


def test_nnx_layers_equal_the_functional_ops(nnx):
    from jaxpool import nnx as jpnnx

    values, indices = _functional_pool3d(X5)
    got = jpnnx.MaxPool3d(3, 2, 1, return_indices=True)(X5)
    assert_same(got[0], values)
    assert_same(got[1], indices)
    assert_same(jpnnx.MaxPool3d(3, 2, 1)(X5), values)  # values alone by default
    a, _ = jaxpool.adaptive_max_pool2d(X4, (3, 4), channels_last=True)
    assert_same(jpnnx.AdaptiveMaxPool2d((3, 4))(X4), a)
    v2, i2 = jaxpool.max_pool2d_with_argmax(X4, 2, channels_last=True)
    # PyTorch's default unpool size, (in - 1) * stride - 2 * padding + k: 8 x 8.
    up = jpnnx.MaxUnpool2d(2)(v2, i2)
    assert up.shape == (2, 8, 8, 3)
    assert_same(
        up, jaxpool.max_unpool2d(v2, i2, output_size=(8, 8), channels_last=True)
    )
    up = jpnnx.MaxUnpool2d(2)(v2, i2, output_size=(8, 9))
    assert_same(
        up, jaxpool.max_unpool2d(v2, i2, 2, None, 0, (8, 9), channels_last=True)
    )
    v3, i3 = _functional_pool3d(X5)
    up3 = jpnnx.MaxUnpool3d(3, 2, 1)(v3, i3, (6, 7, 5))
    want3 = jaxpool.max_unpool3d(v3, i3, 3, 2, 1, (6, 7, 5), channels_last=True)
    assert_same(up3, want3)
    # PyTorch's nn.MaxUnpool3d(3, 2, 1)(x, indices, output_size=x.size()).
    assert_same(jpnnx.MaxUnpool3d(3, 2, 1)(v3, i3, X5.shape), want3)


def test_nnx_model_differentiates_under_nnx_jit_and_grad(nnx):
    """nnx.jit(nnx.value_and_grad) through the layers gives the gradient of the
    same model written with the functional ops."""
    from jaxpool import nnx as jpnnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.conv = nnx.Conv(3, 4, (3, 3, 3), rngs=rngs)
            self.pool = jpnnx.MaxPool3d(2, return_indices=True)
            self.head = jpnnx.AdaptiveMaxPool2d(1)

        def __call__(self, x):
            y, _ = self.pool(self.conv(x))
            n, d, h, w, c = y.shape
            return jnp.sum(self.head(y.reshape(n * d, h, w, c)) ** 2)

    model = Net(nnx.Rngs(0))
    x = jnp.asarray(X5)
    loss, grads = nnx.jit(lambda m, x: nnx.value_and_grad(lambda m: m(x))(m))(model, x)

    def functional(kernel, bias):
        y = jax.lax.conv_general_dilated(
            x, kernel, (1, 1, 1), "SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC")
        )
        y, _ = jaxpool.max_pool3d_with_argmax(
            y + bias[None, None, None, None], 2, channels_last=True
        )
        n, d, h, w, c = y.shape
        y = y.reshape(n * d, h, w, c)
        return jnp.sum(jaxpool.adaptive_max_pool2d(y, 1, channels_last=True)[0] ** 2)

    kernel, bias = model.conv.kernel[...], model.conv.bias[...]
    want_loss, want = jax.value_and_grad(functional, argnums=(0, 1))(kernel, bias)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    np.testing.assert_allclose(grads["conv"]["kernel"][...], want[0], rtol=1e-5)
    np.testing.assert_allclose(grads["conv"]["bias"][...], want[1], rtol=1e-5)
    assert float(jnp.abs(want[0]).sum()) > 0


def test_linen_layers_apply_and_differentiate(linen):
    from jaxpool import linen as jplinen

    values, indices = _functional_pool3d(X5)
    layer = jplinen.MaxPool3d(kernel_size=3, stride=2, padding=1, return_indices=True)
    got = jax.jit(layer.apply)({}, X5)
    assert_same(got[0], values)
    assert_same(got[1], indices)

    class Net(linen.Module):
        @linen.compact
        def __call__(self, x):
            x = linen.Conv(4, (3, 3))(x)
            x, indices = jplinen.MaxPool2d(kernel_size=2, return_indices=True)(x)
            up = jplinen.MaxUnpool2d(kernel_size=2)(x, indices)
            return jplinen.AdaptiveMaxPool2d(output_size=2)(up).sum()

    net = Net()
    params = net.init(jax.random.key(0), X4)
    grads = jax.jit(jax.grad(net.apply))(params, X4)
    assert float(jnp.abs(grads["params"]["Conv_0"]["kernel"]).sum()) > 0


def test_equinox_layers_follow_equinox_conventions(eqx):
    from jaxpool import eqx as jpeqx

    x = np.moveaxis(X5, -1, 1)  # (N, C, D, H, W): Equinox is channels-first
    layer = jpeqx.MaxPool3d(3, 2, 1, return_indices=True)
    assert jax.tree_util.tree_leaves(layer) == []  # every argument is static
    values, indices = jax.vmap(lambda x: layer(x, key=jax.random.key(0)))(x)
    want = jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)
    assert_same(values, want[0])
    assert_same(indices, want[1])
    up = jax.vmap(jpeqx.MaxUnpool3d(3, 2, 1), in_axes=(0, 0, None))(
        values, indices, (6, 7, 5)
    )
    assert_same(up, jaxpool.max_unpool3d(*want, 3, 2, 1, (6, 7, 5)))
    head = jpeqx.AdaptiveMaxPool2d([2, None])  # lists become static tuples
    assert head.output_size == (2, None)

    class Net(eqx.Module):
        conv: eqx.nn.Conv3d
        pool: jpeqx.MaxPool3d

        def __call__(self, x):
            return self.pool(self.conv(x)).sum()

    net = Net(eqx.nn.Conv3d(3, 2, 3, key=jax.random.key(1)), jpeqx.MaxPool3d(2))
    grads = eqx.filter_jit(eqx.filter_grad(lambda n, x: jax.vmap(n)(x).sum()))(net, x)
    assert float(jnp.abs(grads.conv.weight).sum()) > 0


def test_layers_take_every_argument_of_the_functions(eqx, nnx, linen):
    """The layers' fields are the functions' argument definitions: the
    algorithm and the implementation reach the functional op."""
    from jaxpool import eqx as jpeqx
    from jaxpool import linen as jplinen
    from jaxpool import nnx as jpnnx

    kw = dict(algorithm="gather", implementation="pallas", return_indices=True)
    want = _functional_pool3d(X5, algorithm="gather", implementation="pallas")
    for got in (
        jpnnx.MaxPool3d(3, 2, 1, **kw)(X5),
        jplinen.MaxPool3d(3, 2, 1, **kw).apply({}, X5),
        jax.vmap(jpeqx.MaxPool3d(3, 2, 1, channels_last=True, **kw))(X5),
    ):
        assert_same(got[0], want[0], "values")
        assert_same(got[1], want[1], "indices")
    with pytest.raises(ValueError, match=r"`implementation` must be None"):
        jpnnx.AdaptiveMaxPool2d(2, implementation="cuda")(X4)


def test_layers_validate_their_arguments(eqx, nnx):
    from jaxpool import eqx as jpeqx
    from jaxpool import nnx as jpnnx

    with pytest.raises(ValueError, match=r"max_pool3d_with_argmax: `padding`"):
        jpnnx.MaxPool3d(2, padding=3)(X5)
    with pytest.raises(ValueError, match=r"max_pool3d_with_argmax: `x` must have"):
        jpeqx.MaxPool3d(2)(X5[0, 0])  # 3-D: (C, D, H, W) expected
    with pytest.raises(ValueError, match=r"max_unpool2d: `x` must have"):
        jpnnx.MaxUnpool2d(2)(X4[0, 0], X4[0, 0].astype(np.int32))
    # The output size is checked as PyTorch's layer checks it.
    v, i = jaxpool.max_pool2d_with_argmax(X4, 2, channels_last=True)
    with pytest.raises(
        ValueError, match=r"max_unpool2d: `output_size` \(4, 32\) is inv"
    ):
        jpnnx.MaxUnpool2d(2)(v, i, (4, 32))
    with pytest.raises(ValueError, match=r"max_unpool3d: `padding` must be between"):
        jpeqx.MaxUnpool3d(2, padding=2)(X5[0], X5[0].astype(np.int32))


@pytest.mark.parametrize(
    "module, blocked, extra",
    [
        ("jaxpool.nnx", "flax", "flax"),
        ("jaxpool.linen", "flax", "flax"),
        ("jaxpool.eqx", "equinox", "equinox"),
    ],
)
def test_missing_optional_dependency_names_the_extra(
    monkeypatch, module, blocked, extra
):
    for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)  # import of it now fails
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'jaxpool\[{extra}\]'"):
        importlib.import_module(module)
