"""jaxpool.keras: Keras 3 layers on the JAX backend.

Their values and indices against ``tf.nn.max_pool_with_argmax`` (and the
NumPy for-loop of TensorFlow's rule where TensorFlow has no op: 3-D,
channels-first), the adaptive layers against PyTorch's windows where
Keras's own returns NaN, the unpooling layers, and a ``keras.Model`` of every
layer trained with ``fit``, saved as ``.keras`` and loaded."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from cases import INF, NAN
from helpers import (
    assert_same,
    flat_scatter_add,
    make_input,
    optional,
    require,
    rng_for,
    tf_pool_oracle,
)

from jaxpool import reference
from jaxpool import tf as jptf

pytestmark = pytest.mark.forms("cpu")

POOLS = ["MaxPoolingWithArgmax1D", "MaxPoolingWithArgmax2D", "MaxPoolingWithArgmax3D"]
ADAPTIVE = [f"AdaptiveMaxPoolingWithArgmax{n}D" for n in (1, 2, 3)]
UNPOOLS = ["MaxUnpooling1D", "MaxUnpooling2D", "MaxUnpooling3D"]


@pytest.fixture(scope="module")
def keras():
    keras = require("keras")
    assert keras.backend.backend() == "jax", "tests/conftest.py sets KERAS_BACKEND"
    return keras


@pytest.fixture(scope="module")
def jpkeras(keras):
    from jaxpool import keras as jpkeras

    return jpkeras


def _input(rng, shape) -> np.ndarray:
    """float32 small integers (ties, signed zeros) with NaN and +-inf."""
    x = make_input(rng, shape, "float32", "ties")
    x[rng.random(shape) < 0.15] = NAN
    x[rng.random(shape) < 0.1] = -INF
    return x


def _to_first(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, -1, 1)


# (layer arguments, NHWC input shape): TensorFlow's op for each.
TF_LAYERS = [
    (dict(), (2, 6, 8, 3)),
    (dict(pool_size=3, strides=2, padding="same"), (2, 7, 9, 2)),
    (dict(pool_size=(3, 2), strides=(1, 3), padding="SAME"), (1, 5, 7, 2)),
]


def test_max_pooling_layers_are_tensorflows(jpkeras):
    """2-D channels-last: ``tf.nn.max_pool_with_argmax``, bit for bit (1-D is
    its one-row pool); channels-first and 3-D: TensorFlow's rule, the index
    counted in the image as laid out."""
    rng = rng_for("keras pools")
    tf = optional("tensorflow")
    for kwargs, shape in TF_LAYERS:
        x = _input(rng, shape)
        values, indices = jpkeras.MaxPoolingWithArgmax2D(**kwargs)(x)
        k = jptf._window("", "", kwargs.get("pool_size", 2))
        s = jptf._window("", "", kwargs.get("strides", k))
        padding = kwargs.get("padding", "valid").upper()
        want, want_index = tf_pool_oracle(x, k, s, padding)
        assert_same(values, want, f"{kwargs}")
        np.testing.assert_array_equal(np.asarray(indices), want_index)
        if tf is not None:
            tv, ti = tf.nn.max_pool_with_argmax(x, k, s, padding)
            assert_same(values, tv.numpy(), f"{kwargs} vs TensorFlow")
            np.testing.assert_array_equal(np.asarray(indices), ti.numpy())
        first = jpkeras.MaxPoolingWithArgmax2D(**kwargs, data_format="channels_first")
        cv, ci = first(_to_first(x))
        assert_same(cv, _to_first(want), f"{kwargs} channels-first")
        c, spatial = shape[-1], shape[1] * shape[2]
        channel_first_index = (want_index % c) * spatial + want_index // c
        np.testing.assert_array_equal(np.asarray(ci), _to_first(channel_first_index))
    x = _input(rng, (2, 11, 3))  # 1-D: a one-row pool
    values, indices = jpkeras.MaxPoolingWithArgmax1D(3, 2, "same")(x)
    want, want_index = tf_pool_oracle(x[:, None], (1, 3), (1, 2), "SAME")
    assert_same(values, want[:, 0], "1-D")
    np.testing.assert_array_equal(np.asarray(indices), want_index[:, 0])
    x = _input(rng, (1, 3, 5, 4, 2))
    values, indices = jpkeras.MaxPoolingWithArgmax3D((2, 3, 2), padding="same")(x)
    want, want_index = tf_pool_oracle(x, (2, 3, 2), (2, 3, 2), "SAME")
    assert_same(values, want, "3-D")
    np.testing.assert_array_equal(np.asarray(indices), want_index)


def test_adaptive_layers_take_pytorchs_windows_where_keras_gives_nan(keras, jpkeras):
    """50x50 to 7x7, where Keras 3.15.1's own layer on JAX returns NaN in its
    last row and column: PyTorch's windows (jaxpool's reference), indices
    flat in the image."""
    rng = rng_for("keras adaptive")
    x = rng.standard_normal((2, 50, 50, 3)).astype(np.float32)
    values, indices = jpkeras.AdaptiveMaxPoolingWithArgmax2D(7)(x)
    want, plane = reference.adaptive_max_pool(_to_first(x), (7, 7))
    assert_same(values, np.moveaxis(want, 1, -1), "values")
    flat = np.moveaxis(plane, 1, -1) * 3 + np.arange(3)
    np.testing.assert_array_equal(np.asarray(indices), flat)
    if keras.__version__ == "3.15.1":  # the docs' claim
        theirs = np.asarray(keras.layers.AdaptiveMaxPooling2D(7)(x))
        assert np.isnan(theirs[:, -1]).all() and np.isnan(theirs[:, :, -1]).all()
        assert not np.isnan(theirs[:, :-1, :-1]).any()
    for nd, shape, out in [(1, (2, 3, 10), 4), (3, (1, 2, 5, 7, 6), (3, 4, 2))]:
        x = make_input(rng, shape, "float32", "ties")  # channels-first
        layer = getattr(jpkeras, ADAPTIVE[nd - 1])(out, data_format="channels_first")
        values, indices = layer(x)
        want, plane = reference.adaptive_max_pool(x, (out,) * nd if nd == 1 else out)
        assert_same(values, want, f"{nd}-D")
        per = int(np.prod(shape[2:]))
        channel = np.arange(shape[1]).reshape(-1, *(1,) * nd)
        np.testing.assert_array_equal(np.asarray(indices), channel * per + plane)
    # TensorFlow's rule: NaN is skipped unless first.
    x = np.array([[[1.0], [NAN], [3.0], [NAN], [2.0]]], np.float32)
    values, indices = jpkeras.AdaptiveMaxPoolingWithArgmax1D(2)(x)
    assert np.asarray(values).ravel().tolist() == [3.0, 3.0]
    assert np.asarray(indices).ravel().tolist() == [2, 2]


def test_unpooling_layers(jpkeras):
    """Each value at its index: ``size`` times the pooled size, an
    ``output_size``, or a third input's size; values at one index summed."""
    rng = rng_for("keras unpool")
    x = rng.integers(-9, 10, (2, 5, 7, 3)).astype(np.float32)
    values, indices = jpkeras.MaxPoolingWithArgmax2D(3, 1, "same")(x)  # overlapping
    values, indices = np.asarray(values), np.asarray(indices)
    want = flat_scatter_add(values, indices, x.shape).astype(np.float32)
    layer = jpkeras.MaxUnpooling2D(output_size=(5, 7))
    assert_same(layer([values, indices]), want, "output_size")
    assert_same(jpkeras.MaxUnpooling2D()([values, indices, x]), want, "like")
    assert_same(jptf.max_unpool(values, indices, (5, 7)), want, "jaxpool.tf")
    doubled = jpkeras.MaxUnpooling2D()([values, indices])
    assert doubled.shape == (2, 10, 14, 3)
    assert layer.compute_output_shape([values.shape, indices.shape]) == x.shape
    for nd, shape, size in [(1, (2, 3, 9), 3), (3, (1, 2, 4, 6, 4), (2, 3, 2))]:
        x = rng.integers(-9, 10, shape).astype(np.float32)
        pool = getattr(jpkeras, POOLS[nd - 1])(size, data_format="channels_first")
        values, indices = pool(x)
        unpool = getattr(jpkeras, UNPOOLS[nd - 1])(size, data_format="channels_first")
        got = unpool([values, indices])
        pooled = np.asarray(values)
        want = flat_scatter_add(pooled, np.asarray(indices), got.shape)
        assert_same(got, want.astype(np.float32), f"{nd}-D")
        assert unpool.compute_output_shape([values.shape, indices.shape]) == got.shape


def test_output_shapes(jpkeras):
    """``compute_output_shape``: Keras's pooled sizes, ``None`` kept."""
    for name, args, shape in [
        ("MaxPoolingWithArgmax2D", dict(), (None, 7, 9, 3)),
        (
            "MaxPoolingWithArgmax2D",
            dict(pool_size=3, strides=2, padding="same"),
            (4, 7, 9, 3),
        ),
        ("MaxPoolingWithArgmax1D", dict(pool_size=4, strides=3), (2, 11, 3)),
        (
            "MaxPoolingWithArgmax3D",
            dict(padding="same", data_format="channels_first"),
            (1, 2, 3, 5, 4),
        ),
        ("AdaptiveMaxPoolingWithArgmax2D", dict(output_size=(3, 4)), (2, 10, 11, 3)),
    ]:
        layer = getattr(jpkeras, name)(**args)
        x = jax.ShapeDtypeStruct(tuple(n or 2 for n in shape), np.float32)
        values, indices = jax.eval_shape(layer, x)
        predicted = layer.compute_output_shape(shape)
        assert predicted[0] == predicted[1]
        assert tuple(n or 2 for n in predicted[0]) == values.shape == indices.shape
        if shape[0] is None:
            assert predicted[0][0] is None


@pytest.fixture
def rank_promotion():
    """Keras's own layers (``Dense``'s bias) broadcast arrays of unequal
    ranks, which tests/conftest.py makes an error for jaxpool's code."""
    with jax.numpy_rank_promotion("allow"):
        yield


@pytest.mark.usefixtures("rank_promotion")
def test_model_trains_saves_and_loads(keras, jpkeras, tmp_path):
    """A pool, an unpool to the pool's input size, an adaptive pool and an
    unpool to a given size in one ``keras.Model``: ``fit`` lowers the loss,
    and the model saved as ``.keras`` loads and predicts the same, bit for
    bit. (The 1-D and 3-D layers run the same code; their configurations
    round-trip below.)"""
    keras.utils.set_random_seed(0)
    layers = keras.layers
    inputs = keras.Input((8, 8, 2))
    h = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    v, i = jpkeras.MaxPoolingWithArgmax2D(3, 2, "same")(h)
    up = jpkeras.MaxUnpooling2D()([v, i, h])
    a, j = jpkeras.AdaptiveMaxPoolingWithArgmax2D(3)(up)
    up = jpkeras.MaxUnpooling2D(output_size=(5, 4))([a, j])
    out = layers.Dense(1)(layers.GlobalAveragePooling2D()(up))
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    rng = np.random.default_rng(0)
    data = rng.standard_normal((16, 8, 8, 2)).astype(np.float32)
    target = data.reshape(16, -1).max(axis=1, keepdims=True)
    history = model.fit(data, target, batch_size=8, epochs=4, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.85 * losses[0], losses
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert_same(loaded.predict(data, verbose=0), model.predict(data, verbose=0), "load")
    kinds = [type(layer).__name__ for layer in loaded.layers]
    assert kinds.count("MaxUnpooling2D") == 2 and "MaxPoolingWithArgmax2D" in kinds


def test_every_layer_is_registered(keras, jpkeras):
    for name in [*POOLS, *ADAPTIVE, *UNPOOLS]:
        found = keras.saving.get_registered_object(f"jaxpool>{name}")
        assert found is getattr(jpkeras, name)


def test_config_round_trips(jpkeras):
    for layer in [
        jpkeras.MaxPoolingWithArgmax2D((3, 2), 2, "SAME", "channels_first", name="p"),
        jpkeras.MaxPoolingWithArgmax1D(),
        jpkeras.AdaptiveMaxPoolingWithArgmax3D((1, 2, 3)),
        jpkeras.MaxUnpooling2D(3),
        jpkeras.MaxUnpooling3D(output_size=(4, 5, 6), data_format="channels_last"),
    ]:
        config = layer.get_config()
        assert type(layer).from_config(config).get_config() == config
    config = jpkeras.MaxPoolingWithArgmax2D(padding="SAME").get_config()
    assert config["padding"] == "same" and config["strides"] == (2, 2)


# (layer, arguments, pattern after "<layer>: ")
BAD_LAYER_ARGS = [
    (
        "MaxPoolingWithArgmax2D",
        dict(pool_size=(2, 2, 2)),
        r"`pool_size` must be an int or a tuple of 2 ints, each > 0, "
        r"got pool_size=\(2, 2, 2\)",
    ),
    ("MaxPoolingWithArgmax2D", dict(pool_size=0), r"`pool_size` .* got pool_size=0"),
    (
        "MaxPoolingWithArgmax1D",
        dict(pool_size=2.0),
        r"`pool_size` .* got pool_size=2.0",
    ),
    (
        "MaxPoolingWithArgmax3D",
        dict(strides=(1, 0, 1)),
        r"`strides` .* got strides=\(1, 0, 1\)",
    ),
    (
        "MaxPoolingWithArgmax2D",
        dict(padding="full"),
        r"`padding` must be one of \('valid', 'same'\), got padding='full'",
    ),
    (
        "MaxPoolingWithArgmax2D",
        dict(data_format="nchw"),
        r"`data_format` must be one of .* got data_format='nchw'",
    ),
    (
        "AdaptiveMaxPoolingWithArgmax2D",
        dict(output_size=(7, 7, 7)),
        r"`output_size` .* got output_size=\(7, 7, 7\)",
    ),
    (
        "AdaptiveMaxPoolingWithArgmax1D",
        dict(output_size=True),
        r"`output_size` .* got output_size=True",
    ),
    ("MaxUnpooling2D", dict(size="2"), r"`size` .* got size='2'"),
    (
        "MaxUnpooling3D",
        dict(output_size=(4, 4)),
        r"`output_size` .* got output_size=\(4, 4\)",
    ),
]


@pytest.mark.parametrize("name, kwargs, pattern", BAD_LAYER_ARGS)
def test_bad_arguments(jpkeras, name, kwargs, pattern):
    with pytest.raises(ValueError, match=f"{name}: {pattern}"):
        getattr(jpkeras, name)(**kwargs)


def test_bad_calls(jpkeras):
    values = np.zeros((1, 2, 2, 1), np.float32)
    unpool = jpkeras.MaxUnpooling2D()
    with pytest.raises(
        ValueError, match=r"MaxUnpooling2D: the layer is called on \[values, indices\]"
    ):
        unpool(values)
    with pytest.raises(
        TypeError,
        match="MaxUnpooling2D: `indices` must have an integer dtype, got float32",
    ):
        unpool([values, values])
    with pytest.raises(
        ValueError,
        match=r"MaxUnpooling2D: `indices` must have `values`' shape \(1, 2, 2, 1\)",
    ):
        unpool([values, np.zeros((1, 2, 1, 1), np.int32)])
    with pytest.raises(
        ValueError, match=r"MaxPoolingWithArgmax2D: output size \(0, 0\) is too small"
    ):
        jpkeras.MaxPoolingWithArgmax2D(3)(values)


def test_other_backends_are_named(jpkeras, keras, monkeypatch):
    monkeypatch.setattr(keras.backend, "backend", lambda: "tensorflow")
    with pytest.raises(
        RuntimeError,
        match=r"MaxUnpooling1D: jaxpool.keras runs on Keras's JAX backend only, "
        r"got backend 'tensorflow'",
    ):
        jpkeras.MaxUnpooling1D()
