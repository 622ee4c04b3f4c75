"""A SegNet-style encoder-decoder: pool with argmax, unpool with the indices.

    pip install 'jaxpool[examples]'
    python examples/segnet_unpool.py                  # writes segnet_unpool.png
    python examples/segnet_unpool.py --steps 60 --out /tmp/segnet.png

The encoder pools with ``jaxpool.max_pool2d_with_argmax`` and keeps the
indices; the decoder puts each pooled value back where its maximum was with
``jaxpool.nnx.MaxUnpool2d`` (SegNet's trick: the decoder learns no upsampling,
the argmax restores the positions of edges). Trained briefly (Flax NNX, optax)
to reconstruct synthetic images of bright rectangles and discs; saves a PNG of
inputs above outputs and prints the loss at the start and the end.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm import tqdm

import jaxpool
from jaxpool import nnx as jpnnx

SIZE = 32


def images(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n, 32, 32, 1)`` float32 images: a few rectangles and discs."""
    yy, xx = np.mgrid[:SIZE, :SIZE]
    out = np.zeros((n, SIZE, SIZE), np.float32)
    for i in range(n):
        for _ in range(rng.integers(1, 4)):
            cy, cx = rng.uniform(4, SIZE - 4, 2)
            r = rng.uniform(2.5, 7.0)
            if rng.random() < 0.5:
                shape = (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= 0.7 * r)
            else:
                shape = (yy - cy) ** 2 + (xx - cx) ** 2 <= r**2
            out[i] = np.maximum(out[i], shape * rng.uniform(0.4, 1.0))
    return out[..., None]


class SegNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.enc1 = nnx.Conv(1, 16, (3, 3), rngs=rngs)
        self.enc2 = nnx.Conv(16, 32, (3, 3), rngs=rngs)
        self.dec2 = nnx.Conv(32, 16, (3, 3), rngs=rngs)
        self.dec1 = nnx.Conv(16, 1, (3, 3), rngs=rngs)
        self.unpool = jpnnx.MaxUnpool2d(2)  # PyTorch's nn.MaxUnpool2d(2), channels-last

    def __call__(self, x: jax.Array) -> jax.Array:
        h1 = nnx.relu(self.enc1(x))  # (N, 32, 32, 16)
        p1, i1 = jaxpool.max_pool2d_with_argmax(h1, 2, channels_last=True)
        h2 = nnx.relu(self.enc2(p1))  # (N, 16, 16, 32)
        p2, i2 = jaxpool.max_pool2d_with_argmax(h2, 2, channels_last=True)
        u2 = self.unpool(p2, i2)  # (N, 16, 16, 32), maxima back in place
        u1 = self.unpool(nnx.relu(self.dec2(u2)), i1)  # (N, 32, 32, 16)
        return self.dec1(u1)


def loss_fn(model: SegNet, x: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - x) ** 2)


@nnx.jit
def train_step(model: SegNet, optimizer: nnx.Optimizer, x):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x)
    optimizer.update(model, grads)
    return loss


def save_png(path: str, x: np.ndarray, y: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = x.shape[0]
    fig, axes = plt.subplots(2, n, figsize=(1.6 * n, 3.4))
    for i in range(n):
        for row, img, title in ((0, x, "input"), (1, y, "output")):
            axes[row, i].imshow(img[i, ..., 0], cmap="gray", vmin=0, vmax=1)
            axes[row, i].set_axis_off()
            axes[row, i].set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="segnet_unpool.png")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    x_test = images(rng, 8)
    model = SegNet(nnx.Rngs(args.seed))
    optimizer = nnx.Optimizer(model, optax.adam(2e-3), wrt=nnx.Param)
    start = float(loss_fn(model, x_test))
    bar = tqdm(range(args.steps), desc="train", unit="step")
    for _ in bar:
        loss = train_step(model, optimizer, images(rng, args.batch))
        bar.set_postfix(loss=f"{float(loss):.4f}")
    end = float(loss_fn(model, x_test))
    save_png(args.out, x_test, np.asarray(model(x_test)))
    print(f"held-out MSE {start:.4f} -> {end:.4f}; wrote {args.out}")
    return {"start_loss": start, "end_loss": end}


if __name__ == "__main__":
    main()
