"""Sharded training steps through every op on 8 host devices; prints JSON.

Run by tests/test_sharding.py in a subprocess: the device count flag only
takes effect before JAX starts. Each scenario compiles
``value_and_grad(sum(w * pool(x)))`` with ``x`` and ``w`` sharded over a
(4, 2) mesh on (N, C), and reports the compiled program's collectives, the
shardings of the input and gradient, and whether the numbers equal one device.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import json
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpool

COLLECTIVE = re.compile(
    r"=\s*(?P<type>\(.*?\)|\S+)\s+(?P<op>all-gather|all-to-all|collective-permute"
    r"|reduce-scatter|all-reduce)(?:-start)?\("
)


def array_traffic(hlo: str) -> list[str]:
    """Collectives that move arrays: any but an all-reduce of scalars only."""
    bad = []
    for line in hlo.splitlines():
        m = COLLECTIVE.search(line)
        if m is None:
            continue
        dims = re.findall(r"\[([^\]]*)\]", m["type"])
        if m["op"] != "all-reduce" or any(d.strip() for d in dims):
            bad.append(line.strip()[:200])
    return bad


def collectives(hlo: str) -> list[str]:
    return [m["op"] for m in map(COLLECTIVE.search, hlo.splitlines()) if m]


OPS = {
    "max_pool3d": (
        (8, 4, 6, 7, 6),
        lambda x, a: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, algorithm=a),
    ),
    "adaptive_max_pool2d": (
        (8, 4, 10, 9),
        lambda x, a: jaxpool.adaptive_max_pool2d(x, (3, 4), algorithm=a),
    ),
}


def merged(pool):
    """The negative control: pool, then differentiate through a gather from the
    input flattened over N*C (global offsets), whose transpose is a scatter
    into one merged array: the partitioner cannot keep (N, C) sharding."""

    def f(x, a):
        _, indices = pool(jax.lax.stop_gradient(x), a)
        n, c = x.shape[:2]
        plane = int(np.prod(x.shape[2:]))
        base = (jnp.arange(n)[:, None] * c + jnp.arange(c)[None, :]) * plane
        flat = base.reshape(n, c, *([1] * (indices.ndim - 2))) + indices
        return x.reshape(-1)[flat], indices

    return f


def scenario(op, mesh_kind, algorithm, variant):
    shape, pool = OPS[op]
    if variant == "merged":
        pool = merged(pool)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    out_shape = jax.eval_shape(lambda x: pool(x, algorithm)[0], x).shape
    w = rng.standard_normal(out_shape).astype(np.float32)

    def loss(x, w):
        return jnp.sum(w * pool(x, algorithm)[0])

    step = jax.jit(jax.value_and_grad(loss))
    want_loss, want_grad = step(x, w)  # one device

    if mesh_kind == "auto":
        mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("n", "c"))
    else:
        mesh = jax.make_mesh((4, 2), ("n", "c"), axis_types=(AxisType.Explicit,) * 2)
    sharding = NamedSharding(mesh, P("n", "c"))
    with jax.set_mesh(mesh):
        xs, ws = jax.device_put(x, sharding), jax.device_put(w, sharding)
        hlo = step.lower(xs, ws).compile().as_text()
        got_loss, got_grad = step(xs, ws)
    expected = NamedSharding(mesh, P("n", "c", *[None] * (len(shape) - 2)))
    return {
        "collectives": collectives(hlo),
        "array_traffic": array_traffic(hlo),
        "x_sharded": xs.sharding.is_equivalent_to(expected, len(shape)),
        "grad_sharded": got_grad.sharding.is_equivalent_to(expected, len(shape)),
        "grad_shards": len({str(s.index) for s in got_grad.addressable_shards}),
        "loss_close": bool(np.allclose(got_loss, want_loss, rtol=1e-5)),
        "grad_equal": bool(np.array_equal(np.asarray(got_grad), np.asarray(want_grad))),
    }


def shard_map_scenario(op):
    shape, pool = OPS[op]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    mesh = jax.make_mesh((4, 2), ("n", "c"), axis_types=(AxisType.Explicit,) * 2)
    f = jax.jit(
        jax.shard_map(
            lambda x: pool(x, "scatter"),
            mesh=mesh,
            in_specs=P("n", "c"),
            out_specs=P("n", "c"),
        )
    )
    xs = jax.device_put(x, NamedSharding(mesh, P("n", "c")))
    values, indices = f(xs)
    want_values, want_indices = pool(x, "scatter")
    return {
        "collectives": collectives(f.lower(xs).compile().as_text()),
        "equal": bool(
            np.array_equal(values, want_values)
            and np.array_equal(indices, want_indices)
        ),
    }


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    results = {}
    for op in OPS:
        for mesh_kind in ("auto", "explicit"):
            for algorithm in ("scatter", "gather"):
                key = f"{op}/{mesh_kind}/{algorithm}"
                results[key] = scenario(op, mesh_kind, algorithm, "jaxpool")
            try:
                merged_result = scenario(op, mesh_kind, "scatter", "merged")
            except Exception as e:  # Explicit axes reject a bad layout at trace time
                merged_result = {"raised": type(e).__name__, "message": str(e)[:300]}
            results[f"{op}/{mesh_kind}/merged"] = merged_result
        results[f"{op}/shard_map"] = shard_map_scenario(op)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
