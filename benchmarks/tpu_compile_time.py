"""How long XLA's TPU compiler takes over jaxpool's programs, on a compile-only
v5e (no TPU needed; the ``aot`` extra's libtpu):

    JAX_PLATFORMS=cpu python benchmarks/tpu_compile_time.py

One line a program: the seconds to compile it and XLA's cost model's bytes
accessed (an estimate, not a timing). The forward's window reduction once
took a minute here over an integer division in its comparator, 50 s over a
3-D stride-1 one that split each code twice an axis, and 40 s over an integer
division in the decoding of the chosen codes (the performance record, "Compile
time").
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

    def pool(kernel, stride, padding):
        def forward(x, **kw):
            nd = x.ndim - 2
            op = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
            return op(x, kernel, stride, padding, **kw)

        return forward

    def step(forward, **kw):
        return jax.grad(lambda x: jnp.sum(forward(x, **kw)[0]))

    # (label, shape, kernel, stride, padding): a 2-D pool, an I3D inception
    # branch's 3-D pool (stride 1) and one with strides (1, 1, 2), and two
    # large 3-D stride-1 pools of the performance record's TPU table.
    shapes = [
        ("8x64x64x32 k3 s2 p1", (8, 64, 64, 32), 3, 2, 1),
        ("2x32x96³ k3 s1 p1", (2, 32, 96, 96, 96), 3, 1, 1),
        ("4x256x40³ k3 s1 p1", (4, 256, 40, 40, 40), 3, 1, 1),
        ("8x192x16x28² k3 s1 p1", (8, 192, 16, 28, 28), 3, 1, 1),
        ("8x192x16x28² k3 s(1,1,2) p1", (8, 192, 16, 28, 28), 3, (1, 1, 2), 1),
    ]
    for label, shape, *window in shapes:
        x = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sharding)
        forward = pool(*window)
        programs = {
            "forward": forward,
            "step auto": step(forward),
            "step scatter": step(forward, algorithm="scatter"),
        }
        for name, fn in programs.items():
            start = time.perf_counter()
            compiled = jax.jit(fn).trace(x).lower().compile()
            seconds = time.perf_counter() - start
            accessed = compiled.cost_analysis()["bytes accessed"] / 1e6
            print(
                f"{label} {name}: {seconds:.1f} s to compile, "
                f"{accessed:,.0f} MB accessed"
            )


if __name__ == "__main__":
    main()
