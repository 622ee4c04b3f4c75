"""One process of a training step across two processes; prints JSON.

Run by tests/test_distributed.py as ``python distributed_main.py PORT ID``,
twice: processes 0 and 1, each with 4 CPU devices (``JAX_NUM_CPU_DEVICES``),
joined by ``jax.distributed`` on localhost with gloo's collectives, the way
several hosts train one model. The step, a convolution, a pool and an unpool
with the pool's indices (a SegNet block), runs on a global (2, 4) mesh, the
batch over 2 devices and the depth over 4, from global arrays each process
builds from its own data (``jax.make_array_from_callback``). Each process
then compares its shards of the loss, the indices and the gradients with the
same step on one of its own devices.
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ["JAX_NUM_CPU_DEVICES"] = "4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpool

SHAPE = (4, 2, 32, 12, 12)  # N, C, D, H, W: N over 2 devices, D over 4
FEATURES = 4


def block(params: dict, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A SegNet block: convolution, max pool (k3 s2 p1), unpool with its
    indices; the loss against a target, and the pool's indices."""
    y = jax.lax.conv_general_dilated(
        x,
        params["kernel"],
        (1, 1, 1),
        "SAME",
        dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
    )
    y = jax.nn.relu(y)
    values, indices = jaxpool.max_pool3d_with_argmax(y, 3, 2, 1)
    up = jaxpool.max_unpool3d(values, indices, 3, 2, 1, output_size=y.shape)
    return jnp.mean((up - x.mean(axis=1, keepdims=True)) ** 2), indices


def step(params: dict, x: jax.Array) -> tuple:
    (loss, indices), grads = jax.value_and_grad(block, argnums=(0, 1), has_aux=True)(
        params, x
    )
    return loss, indices, grads


def main() -> None:
    port, process = int(sys.argv[1]), int(sys.argv[2])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process)
    assert jax.process_count() == 2 and jax.device_count() == 8
    rng = np.random.default_rng(0)  # every process draws the same data
    x = rng.standard_normal(SHAPE).astype(np.float32)
    kernel = (rng.standard_normal((FEATURES, SHAPE[1], 3, 3, 3)) * 0.3).astype(
        np.float32
    )

    mesh = jax.make_mesh((2, 4), ("n", "d"))
    x_sharding = NamedSharding(mesh, P("n", None, "d"))
    replicated = NamedSharding(mesh, P())
    global_x = jax.make_array_from_callback(SHAPE, x_sharding, lambda i: x[i])
    global_kernel = jax.make_array_from_callback(
        kernel.shape, replicated, lambda i: kernel[i]
    )
    with jax.set_mesh(mesh):
        args = ({"kernel": global_kernel}, global_x)
        hlo = jax.jit(step).lower(*args).compile().as_text()
        loss, indices, (g_params, g_x) = jax.jit(step)(*args)
    ops = re.findall(
        r"(all-gather|all-to-all|collective-permute|reduce-scatter|all-reduce)"
        r"(?:-start)?\(",
        hlo,
    )

    # The same step on one of this process's devices.
    local = jax.local_devices()[0]
    one = jax.jit(step)(
        {"kernel": jax.device_put(kernel, local)}, jax.device_put(x, local)
    )
    want_loss, want_indices, (want_params, want_x) = jax.device_get(one)

    def shards_equal(global_array, want, exact):
        for shard in global_array.addressable_shards:
            got, ref = np.asarray(shard.data), np.asarray(want)[shard.index]
            same = np.array_equal(got, ref) if exact else np.allclose(got, ref, 1e-5)
            if not same:
                return False
        return True

    out = {
        "process": process,
        "devices": [d.id for d in jax.local_devices()],
        "loss_close": bool(np.allclose(np.asarray(loss), want_loss, rtol=1e-5)),
        "indices_equal": shards_equal(indices, want_indices, exact=True),
        "grad_x_close": shards_equal(g_x, want_x, exact=False),
        "grad_kernel_close": shards_equal(
            g_params["kernel"], want_params["kernel"], False
        ),
        "indices_sharded": indices.sharding.is_equivalent_to(x_sharding, 5),
        "grad_x_sharded": g_x.sharding.is_equivalent_to(x_sharding, 5),
        "shards": len(g_x.addressable_shards),
        "collectives": sorted(set(ops)),
    }
    print(json.dumps(out))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
