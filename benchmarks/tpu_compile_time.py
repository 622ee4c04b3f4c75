"""How long XLA's TPU compiler takes over jaxpool's programs, on a compile-only
v5e (no TPU needed; the ``aot`` extra's libtpu):

    JAX_PLATFORMS=cpu python benchmarks/tpu_compile_time.py

One line a program: the seconds to compile it and XLA's cost model's bytes
accessed (an estimate, not a timing). The forward's window reduction once
took a minute here over an integer division in its comparator (the
performance page, "Compile time").
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from jax.experimental import topologies

import jaxpool


def main() -> None:
    tpu = topologies.get_topology_desc("v5e:2x2", "tpu").devices[0]
    sharding = jax.sharding.SingleDeviceSharding(tpu)
    x = jax.ShapeDtypeStruct((8, 64, 64, 32), jnp.float32, sharding=sharding)

    def pool(x, **kw):
        return jaxpool.max_pool2d_with_argmax(x, 3, 2, 1, **kw)

    def step(**kw):
        return jax.grad(lambda x: jnp.sum(pool(x, **kw)[0]))

    programs = {
        "8x64x64x32 k3 s2 p1 forward": pool,
        "8x64x64x32 k3 s2 p1 step auto": step(),
        "8x64x64x32 k3 s2 p1 step scatter": step(algorithm="scatter"),
    }
    for name, fn in programs.items():
        start = time.perf_counter()
        compiled = jax.jit(fn).trace(x).lower().compile()
        seconds = time.perf_counter() - start
        accessed = compiled.cost_analysis()["bytes accessed"] / 1e6
        print(f"{name}: {seconds:.1f} s to compile, {accessed:,.0f} MB accessed")


if __name__ == "__main__":
    main()
