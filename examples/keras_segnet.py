"""A Keras 3 SegNet on the JAX backend: pool with argmax, unpool with the indices.

    pip install 'jaxpool[keras]'
    python examples/keras_segnet.py                    # saves keras_segnet.keras
    python examples/keras_segnet.py --epochs 3 --out /tmp/segnet.keras

The layers a Keras SegNet written on ``tf.nn.max_pool_with_argmax`` uses,
``MaxPoolingWithArgmax2D`` and ``MaxUnpooling2D``, here from
``jaxpool.keras`` on Keras's JAX backend, with TensorFlow's indices. The
encoder pools 30 -> 15 -> 8 (``"same"``); each decoder stage puts the
values back where the encoder's maxima were, at the encoder's own size (the
layer is given the pool's input, ``[values, indices, like]``, so 8 unpools to
15, not 16). Trained with ``model.fit`` to segment synthetic images (noisy
rectangles and discs) into background, rectangles and discs; prints the
held-out loss and pixel accuracy before and after, saves the model as
``.keras``, loads it and checks that it predicts the same.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is first imported

import argparse

import keras
import numpy as np

from jaxpool import keras as jpkeras

SIZE = 30
CLASSES = ("background", "rectangle", "disc")


def images(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 30, 30, 1)`` float32 images of rectangles and discs on noise,
    and ``(n, 30, 30)`` int32 labels: 0 background, 1 rectangle, 2 disc."""
    yy, xx = np.mgrid[:SIZE, :SIZE]
    labels = np.zeros((n, SIZE, SIZE), np.int32)
    for i in range(n):
        for _ in range(rng.integers(1, 4)):
            cy, cx = rng.uniform(4, SIZE - 4, 2)
            r = rng.uniform(3.0, 7.0)
            if rng.random() < 0.5:
                shape, kind = (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= 0.6 * r), 1
            else:
                shape, kind = (yy - cy) ** 2 + (xx - cx) ** 2 <= r**2, 2
            labels[i][shape] = kind
    x = (labels > 0) * rng.uniform(0.5, 1.0, (n, 1, 1))
    x = x + 0.15 * rng.standard_normal(x.shape)
    return x[..., None].astype(np.float32), labels


def segnet() -> keras.Model:
    """Two pools with argmax, two unpools to the encoder's sizes. (16
    channels throughout: Keras draws each new kernel shape's initial weights
    with a program of its own, compiled once per shape.)"""
    layers = keras.layers

    def conv(x, channels):
        return layers.Conv2D(channels, 3, padding="same", activation="relu")(x)

    inputs = keras.Input((SIZE, SIZE, 1))
    e1 = conv(inputs, 16)  # 30 x 30
    p1, i1 = jpkeras.MaxPoolingWithArgmax2D(padding="same")(e1)  # 15 x 15
    e2 = conv(p1, 16)
    p2, i2 = jpkeras.MaxPoolingWithArgmax2D(padding="same")(e2)  # 8 x 8
    d2 = conv(jpkeras.MaxUnpooling2D()([p2, i2, e2]), 16)  # back to 15 x 15
    d1 = conv(jpkeras.MaxUnpooling2D()([d2, i1, e1]), 16)  # 30 x 30
    logits = layers.Conv2D(len(CLASSES), 1)(d1)
    return keras.Model(inputs, logits, name="segnet")


def scores(logits: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy and pixel accuracy of ``logits`` for ``labels``."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_p, labels[..., None], axis=-1)
    return float(-picked.mean()), float((logits.argmax(-1) == labels).mean())


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="keras_segnet.keras")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    x_train, y_train = images(rng, args.train)
    x_test, y_test = images(rng, 64)
    model = segnet()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    start_loss, start_accuracy = scores(model.predict(x_test, verbose=0), y_test)
    model.fit(x_train, y_train, batch_size=args.batch, epochs=args.epochs, verbose=2)
    logits = model.predict(x_test, verbose=0)
    end_loss, end_accuracy = scores(logits, y_test)
    print(
        f"held-out loss {start_loss:.4f} -> {end_loss:.4f}, "
        f"pixel accuracy {start_accuracy:.3f} -> {end_accuracy:.3f}"
    )
    model.save(args.out)
    loaded = keras.saving.load_model(args.out)  # jaxpool.keras registered its layers
    same = np.array_equal(loaded.predict(x_test, verbose=0), logits)
    print(
        f"saved {args.out}; the loaded model predicts the same: {'yes' * same or 'no'}"
    )
    return {
        "start_loss": start_loss,
        "end_loss": end_loss,
        "start_accuracy": start_accuracy,
        "end_accuracy": end_accuracy,
        "reloaded_same": float(same),
    }


if __name__ == "__main__":
    main()
