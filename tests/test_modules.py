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

# The CPU's forms alone: these tests check the CPU's numbers; the other
# platforms' forms are traced and run in their own tests (tests/conftest.py).
pytestmark = pytest.mark.forms("cpu")

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


# ---------------------------------------------------- every family, every framework

SAMPLES = rng_for("modules-samples").random((2, 3, 2)).astype(np.float32)
# name: (layer class name, constructor arguments, the functional op on a
# channels-last (N, *S, C) input, whose values and indices the layer's equal).
FAMILIES = {
    "pool": (
        "MaxPool3d",
        dict(kernel_size=3, stride=2, padding=1),
        lambda x: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, channels_last=True),
    ),
    "adaptive": (
        "AdaptiveMaxPool2d",
        dict(output_size=(3, 4)),
        lambda x: jaxpool.adaptive_max_pool2d(x, (3, 4), channels_last=True),
    ),
    "fractional": (
        "FractionalMaxPool2d",
        dict(kernel_size=2, output_size=(4, 5)),
        lambda x: jaxpool.fractional_max_pool2d(
            x, 2, (4, 5), samples=SAMPLES, channels_last=True
        ),
    ),
}


def _layer_output(framework, name, kwargs, x):
    """``(values, indices)`` of the layer ``name`` of ``framework`` on the
    channels-last ``x``: NNX and Linen take it as it is, Equinox a
    channels-first example at a time (vmapped); fractional layers are given
    :data:`SAMPLES`."""
    module = importlib.import_module(f"jaxpool.{framework}")
    extra = (SAMPLES,) if name.startswith("Fractional") else ()
    if framework == "eqx":
        layer = getattr(module, name)(**kwargs, return_indices=True)
        first = np.moveaxis(x, -1, 1)
        if extra:
            out = jax.vmap(lambda x, s: layer(x, s))(first, SAMPLES)
        else:
            out = jax.vmap(layer)(first)
        return tuple(np.moveaxis(np.asarray(o), 1, -1) for o in out)
    layer = getattr(module, name)(**kwargs, return_indices=True)
    if framework == "linen":
        return layer.apply({}, x, *extra)
    return layer(x, *extra)


@pytest.mark.parametrize("framework", ["nnx", "linen", "eqx"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_layer_is_its_function(framework, family):
    """Each op family's layer, in each framework, returns its function's
    values and indices (the unpools: test_nnx_layers_equal_the_functional_ops
    and the Equinox conventions below)."""
    require("equinox" if framework == "eqx" else "flax")
    name, kwargs, function = FAMILIES[family]
    x = X5 if name.endswith("3d") else X4
    values, indices = _layer_output(framework, name, kwargs, x)
    want = function(x)
    assert_same(values, want[0], "values")
    assert_same(indices, want[1], "indices")


def test_nnx_layer_draws_from_its_stream_at_every_call():
    require("flax.nnx")
    nnx = importlib.import_module("flax.nnx")
    from jaxpool import nnx as jpnnx

    x = make_input(rng_for("nnx"), (2, 9, 10, 3), "float32", "random")  # N H W C
    kw = dict(output_ratio=0.5, return_indices=True)
    layer = jpnnx.FractionalMaxPool2d(2, rngs=nnx.Rngs(0), **kw)
    first, second = layer(x), layer(x)
    assert first[0].shape == (2, 4, 5, 3)
    assert (np.asarray(first[1]) != np.asarray(second[1])).any()  # new samples
    again = jpnnx.FractionalMaxPool2d(2, rngs=nnx.Rngs(0), **kw)
    assert_same(again(x)[1], first[1])  # the same stream, the same samples
    flat = np.moveaxis(x, -1, 1).reshape(2, 3, -1)
    picked = np.take_along_axis(
        flat, np.moveaxis(np.asarray(first[1]), -1, 1).reshape(2, 3, -1), -1
    )
    assert_same(np.moveaxis(np.asarray(first[0]), -1, 1).reshape(2, 3, -1), picked)
    samples = rng_for("nnx-samples").random((2, 3, 2)).astype(np.float32)
    want = jaxpool.fractional_max_pool2d(
        x, 2, output_ratio=0.5, samples=samples, channels_last=True
    )
    got = layer(x, samples)
    assert_same(got[0], want[0])
    assert_same(got[1], want[1])
    # Under nnx.jit the stream advances too, and the gradient flows.
    values = jpnnx.FractionalMaxPool3d((2, 1, 2), (2, 3, 2), rngs=nnx.Rngs(1))

    @nnx.jit
    def step(layer, x):
        return nnx.grad(lambda layer, x: jnp.sum(layer(x) ** 2), argnums=1)(layer, x)

    x5 = jnp.asarray(
        make_input(rng_for("nnx-3d"), (1, 5, 6, 5, 2), "float32", "random")
    )
    g1, g2 = step(values, x5), step(values, x5)
    assert float(jnp.abs(g1).sum()) > 0
    assert (np.asarray(g1) != np.asarray(g2)).any()
    with pytest.raises(ValueError, match=r"FractionalMaxPool2d: give `rngs`"):
        jpnnx.FractionalMaxPool2d(2, 3)(x)
    # A stream is forked as nnx.Rngs' is: the same samples as from its Rngs.
    stream = nnx.Rngs(0)["fractional"]
    from_stream = jpnnx.FractionalMaxPool2d(2, rngs=stream, **kw)
    assert_same(from_stream(x)[1], first[1])
    with pytest.raises(TypeError, match=r"`rngs` must be an nnx.Rngs or nnx.RngS"):
        jpnnx.FractionalMaxPool2d(2, 3, rngs=jax.random.key(0))


def test_linen_layer_draws_from_make_rng():
    require("flax.linen")
    from jaxpool import linen as jplinen

    x = make_input(rng_for("linen"), (2, 9, 10, 3), "float32", "random")
    layer = jplinen.FractionalMaxPool2d(
        kernel_size=2, output_size=(4, 5), return_indices=True
    )
    key = jax.random.key(0)
    first = jax.jit(layer.apply)({}, x, rngs={"fractional": key})
    assert_same(layer.apply({}, x, rngs={"fractional": key})[1], first[1])
    other = layer.apply({}, x, rngs={"fractional": jax.random.key(1)})
    assert (np.asarray(other[1]) != np.asarray(first[1])).any()
    samples = rng_for("linen-samples").random((2, 3, 2)).astype(np.float32)
    want = jaxpool.fractional_max_pool2d(
        x, 2, (4, 5), samples=samples, channels_last=True
    )
    assert_same(layer.apply({}, x, samples)[1], want[1])


def test_equinox_layer_takes_a_key_at_call():
    require("equinox")
    from jaxpool import eqx as jpeqx

    x = make_input(rng_for("eqx"), (4, 3, 7, 8, 9), "float32", "random")  # N C D H W
    layer = jpeqx.FractionalMaxPool3d(2, (3, 4, 4), return_indices=True)
    assert jax.tree_util.tree_leaves(layer) == []  # every argument is static
    keys = jax.random.split(jax.random.key(0), 4)
    values, indices = jax.vmap(lambda x, k: layer(x, key=k))(x, keys)
    for n in range(4):
        want = jaxpool.fractional_max_pool3d(x[n], 2, (3, 4, 4), key=keys[n])
        assert_same(values[n], want[0])
        assert_same(indices[n], want[1])
    samples = rng_for("eqx-samples").random((3, 3)).astype(np.float32)
    want = jaxpool.fractional_max_pool3d(x[0], 2, (3, 4, 4), samples=samples)
    assert_same(layer(x[0], samples)[1], want[1])
    with pytest.raises(ValueError, match=r"exactly one of `samples` and `key`"):
        layer(x[0])


@pytest.mark.parametrize(
    "module, blocked, extra",
    [
        ("jaxpool.nnx", "flax", "flax"),
        ("jaxpool.linen", "flax", "flax"),
        ("jaxpool.eqx", "equinox", "equinox"),
        ("jaxpool.keras", "keras", "keras"),
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
