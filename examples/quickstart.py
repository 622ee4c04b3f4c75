"""Pool a volume, read the argmax, differentiate through it, and check the result.

python examples/quickstart.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxpool
from jaxpool import reference


def main() -> None:
    x = jax.random.normal(jax.random.key(0), (1, 2, 4, 4, 4))
    values, indices = jaxpool.max_pool3d_with_argmax(x, kernel_size=2)
    print("values  ", values.shape, values.dtype)
    print("indices ", indices.shape, indices.dtype, "(flat offsets d*H*W + h*W + w)")
    print(
        "channel 0, first window: max",
        float(values[0, 0, 0, 0, 0]),
        "at offset",
        int(indices[0, 0, 0, 0, 0]),
    )

    # The index points at the maximum inside its own (n, c) plane.
    plane = x[0, 0].ravel()
    assert plane[indices[0, 0, 0, 0, 0]] == values[0, 0, 0, 0, 0]

    # Gradients flow to each window's argmax, through a scatter-add.
    grad = jax.grad(lambda x: jnp.sum(jaxpool.max_pool3d_with_argmax(x, 2)[0]))(x)
    print("gradient: ones at the", int(grad.sum()), "argmax positions, zeros elsewhere")

    # The NumPy oracle agrees bit for bit.
    want_values, want_indices = reference.max_pool(
        np.asarray(x), (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False
    )
    assert (np.asarray(values) == want_values).all()
    assert (np.asarray(indices) == want_indices).all()
    print("matches jaxpool.reference: yes")

    # Adaptive pooling: any input size to any output size, windows chosen for you.
    image = jax.random.normal(jax.random.key(1), (1, 3, 10, 9))
    pooled, where = jaxpool.adaptive_max_pool2d(image, (3, 4))
    print(
        "adaptive 10x9 -> 3x4:", pooled.shape, "indices h*W + w:", where[0, 0].tolist()
    )
    want_pooled, want_where = reference.adaptive_max_pool(np.asarray(image), (3, 4))
    assert (np.asarray(pooled) == want_pooled).all()
    assert (np.asarray(where) == want_where).all()
    grad = jaxpool.adaptive_max_pool2d_backward(jnp.ones_like(pooled), image, where)
    print("adaptive backward: gradient sums to", float(grad.sum()), "(one per window)")


if __name__ == "__main__":
    main()
