"""Sharded training steps through every op on 8 host devices; prints JSON.

Run by tests/test_sharding.py in a subprocess (``python sharding_main.py
planes`` or ``spatial``, the scenarios' group): the device count flag only
takes effect before JAX starts. Each scenario compiles a step with its
arrays sharded over a mesh and reports the compiled program's collectives,
the shardings of its results, whether the numbers equal one device's, and
per device its temporaries and outputs (XLA's memory analysis) beside
``lax.reduce_window``'s step where there is one.

- ``planes/...``: ``value_and_grad(sum(w * pool(x)))`` with N and C sharded
  over a (4, 2) mesh: nothing may move but the scalar loss;
- ``spatial/...``: the same with spatial axes sharded (alone, with N, two
  at once), Auto and Explicit axes, in the CPU's forms and, exported for a
  TPU or a GPU (the platform check disabled) and run here, theirs: only
  halos may move (collective-permutes no wider than the windows' overlap)
  and scalars;
- ``limits/...``: what the docs say moves more (windows whose starts are no
  constant shift of the output rows; the scatter's any index);
- ``errors/...``: what Explicit axes refuse, and the message.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import functools
import json
import math
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpool

# The compiled program's collectives, as the benchmark reads them.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import sharded

moves = sharded.collectives


def array_traffic(found: list[dict[str, Any]]) -> list[str]:
    """Collectives that move arrays: any but an all-reduce of scalars."""
    return [
        f"{m['op']} {m['shapes']}"
        for m in found
        if m["op"] != "all-reduce" or any(dims for _, dims in m["shapes"])
    ]


def beyond_halos(found: list[dict[str, Any]], row_bytes: int, rows: int) -> list:
    """Collectives that move more than halos: any but an all-reduce of
    scalars and collective-permutes of at most ``rows`` rows (``row_bytes``
    each, a row of the input along a sharded axis, whole along the others)."""
    bad = []
    for m in found:
        if m["op"] == "all-reduce" and not any(dims for _, dims in m["shapes"]):
            continue
        if m["op"] == "collective-permute" and m["bytes"] <= rows * row_bytes:
            continue
        bad.append(f"{m['op']} {m['shapes']} ({m['bytes']} bytes)")
    return bad


def _mesh(shape: tuple[int, ...], names: tuple[str, ...], explicit: bool):
    kind = AxisType.Explicit if explicit else AxisType.Auto
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(names))


def _same(a: Any, b: Any) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _bits(a: Any, b: Any) -> bool:
    """Equal bit for bit (a -0.0 is no 0.0)."""
    return all(
        np.asarray(x).dtype == np.asarray(y).dtype
        and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# ----------------------------------------------------------- N, C sharding

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


def planes_scenario(op, mesh_kind, algorithm, variant):
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
    mesh = _mesh((4, 2), ("n", "c"), mesh_kind == "explicit")
    sharding = NamedSharding(mesh, P("n", "c"))
    with jax.set_mesh(mesh):
        xs, ws = jax.device_put(x, sharding), jax.device_put(w, sharding)
        found = moves(step.lower(xs, ws).compile().as_text())
        got_loss, got_grad = step(xs, ws)
    expected = NamedSharding(mesh, P("n", "c", *[None] * (len(shape) - 2)))
    return {
        "collectives": [m["op"] for m in found],
        "array_traffic": array_traffic(found),
        "x_sharded": xs.sharding.is_equivalent_to(expected, len(shape)),
        "grad_sharded": got_grad.sharding.is_equivalent_to(expected, len(shape)),
        "grad_shards": len({str(s.index) for s in got_grad.addressable_shards}),
        "loss_close": bool(np.allclose(got_loss, want_loss, rtol=1e-5)),
        "grad_equal": bool(np.array_equal(np.asarray(got_grad), np.asarray(want_grad))),
    }


def shard_map_scenario(op):
    shape, pool = OPS[op]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    mesh = _mesh((4, 2), ("n", "c"), explicit=True)
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
        "collectives": [m["op"] for m in moves(f.lower(xs).compile().as_text())],
        "equal": bool(
            np.array_equal(values, want_values)
            and np.array_equal(indices, want_indices)
        ),
    }


# ---------------------------------------------------------- spatial axes


class Case:
    """A pool over a spatially sharded array: ``pool(x, algorithm)`` returns
    ``(values, indices)``; ``span`` the windows' reach (rows) along every
    sharded axis; ``mesh`` and ``names`` the mesh's shape and axis names,
    ``spec`` how ``x`` is sharded."""

    def __init__(self, shape, pool, span, mesh, names, spec):
        self.shape, self.pool, self.span = shape, pool, span
        self.mesh, self.names, self.spec = mesh, names, spec


D8 = ((8,), ("d",))
SPATIAL = {
    "3-D k3 s2 p1, D over 8": Case(
        (2, 4, 64, 16, 16),
        lambda x, a: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, algorithm=a),
        3,
        *D8,
        P(None, None, "d"),
    ),
    "3-D k2 s2, N over 2 and D over 4": Case(
        (2, 4, 64, 16, 16),
        lambda x, a: jaxpool.max_pool3d_with_argmax(x, 2, algorithm=a),
        2,
        (2, 4),
        ("n", "d"),
        P("n", None, "d"),
    ),
    "1-D k4 s4, L over 8": Case(
        (4, 8, 512),
        lambda x, a: jaxpool.max_pool1d_with_argmax(x, 4, algorithm=a),
        4,
        *D8,
        P(None, None, "d"),
    ),
    "3-D k3 s2 p1, D over 4 and H over 2": Case(
        (2, 4, 64, 32, 16),
        lambda x, a: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, algorithm=a),
        3,
        (4, 2),
        ("d", "h"),
        P(None, None, "d", "h"),
    ),
    "3-D k3 s2 p1 channels-last, D over 8": Case(
        (2, 64, 16, 16, 4),
        lambda x, a: jaxpool.max_pool3d_with_argmax(
            x, 3, 2, 1, channels_last=True, algorithm=a
        ),
        3,
        *D8,
        P(None, "d"),
    ),
    "3-D k3 s2 p1 dilation 2 ceil_mode, D over 8": Case(
        (2, 4, 64, 16, 16),
        lambda x, a: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, 2, True, algorithm=a),
        5,
        *D8,
        P(None, None, "d"),
    ),
    "3-D k4 s2 p1 (passes per axis), D over 8": Case(
        (2, 4, 64, 12, 12),
        lambda x, a: jaxpool.max_pool3d_with_argmax(x, 4, 2, 1, algorithm=a),
        4,
        *D8,
        P(None, None, "d"),
    ),
    "2-D k3 s2 p1, H over 8": Case(
        (2, 4, 64, 30),
        lambda x, a: jaxpool.max_pool2d_with_argmax(x, 3, 2, 1, algorithm=a),
        3,
        *D8,
        P(None, None, "d"),
    ),
    "adaptive 3-D 64x20x20 -> 16x5x5, D over 8": Case(
        (2, 4, 64, 20, 20),
        lambda x, a: jaxpool.adaptive_max_pool3d(x, (16, 5, 5), algorithm=a),
        4,
        *D8,
        P(None, None, "d"),
    ),
    "adaptive 2-D 96x20 -> 24x7, H over 8": Case(
        (2, 4, 96, 20),
        lambda x, a: jaxpool.adaptive_max_pool2d(x, (24, 7), algorithm=a),
        4,
        *D8,
        P(None, None, "d"),
    ),
}
# The cases run with Explicit axes too, and exported for a TPU and a GPU
# (each platform's forms).
EXPLICIT = [
    "3-D k3 s2 p1, D over 8",
    "3-D k2 s2, N over 2 and D over 4",
    "3-D k3 s2 p1, D over 4 and H over 2",
]
EXPORTED = ["3-D k3 s2 p1, D over 8", "3-D k3 s2 p1, D over 4 and H over 2"]


def _row_bytes(case: Case) -> int:
    """Bytes of one row of ``x`` along its most finely sharded axis, whole
    along the others: a halo of ``span`` rows is at most ``span`` of them."""
    sizes = [n for n, name in zip(case.shape, case.spec, strict=False) if name]
    return 4 * math.prod(case.shape) // min(sizes)


def _step(case: Case, algorithm: str):
    """``value_and_grad(sum(w * values))``, the pool's values and indices
    returned beside it: one program."""

    def loss(x, w):
        values, indices = case.pool(x, algorithm)
        return jnp.sum(w * values), (values, indices)

    return jax.jit(jax.value_and_grad(loss, has_aux=True))


def _data(case: Case) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(case.shape).astype(np.float32)
    out = jax.eval_shape(lambda x: case.pool(x, "gather")[0], x)
    return x, rng.integers(-3, 4, out.shape).astype(np.float32)


@functools.cache
def _one_device(name: str) -> Any:
    """One device's step, with its deterministic sum: the same terms in the
    same order as the sharded step's."""
    return _step(SPATIAL[name], "gather")(*_data(SPATIAL[name]))


def spatial_scenario(name: str, explicit: bool, algorithm: str, platform=None):
    """The step of ``SPATIAL[name]`` on its mesh; ``platform``: exported for
    it (``"tpu"``, ``"cuda"``) and run here, else the CPU's own program."""
    case = SPATIAL[name]
    x, w = _data(case)
    step = _step(case, algorithm)
    (want_loss, want_forward), want_grad = _one_device(name)
    mesh = _mesh(case.mesh, case.names, explicit)
    x_sharding = NamedSharding(mesh, case.spec)
    divisible = all(
        n % math.prod(mesh.shape[a] for a in (names,) if isinstance(a, str)) == 0
        for n, names in zip(w.shape, case.spec, strict=False)
        if names
    )
    w_sharding = NamedSharding(mesh, case.spec if divisible else P())
    with jax.set_mesh(mesh):
        xs, ws = jax.device_put(x, x_sharding), jax.device_put(w, w_sharding)
        if platform is not None:
            step = jax.jit(
                export.export(
                    jax.jit(step, in_shardings=(x_sharding, w_sharding)),
                    platforms=[platform],
                    disabled_checks=[export.DisabledSafetyCheck.platform()],
                )(xs, ws).call
            )
        compiled = step.lower(xs, ws).compile()
        (got_loss, got_forward), got_grad = step(xs, ws)
    found = moves(compiled.as_text())
    return {
        "collectives": sorted({m["op"] for m in found}),
        "beyond_halos": beyond_halos(found, _row_bytes(case), case.span - 1),
        "grad_sharded": got_grad.sharding.is_equivalent_to(x_sharding, x.ndim),
        "values_sharded": not divisible
        or got_forward[0].sharding.is_equivalent_to(w_sharding, x.ndim),
        "loss_close": bool(np.allclose(got_loss, want_loss, rtol=1e-5)),
        "grad_equal": _same(got_grad, want_grad),
        "forward_equal": _same(got_forward, want_forward),
    }


def memory_scenario() -> list[dict]:
    """Per device, the step's temporaries and outputs as the devices that
    split D grow, jaxpool's and ``lax.reduce_window``'s
    (``benchmarks/sharded.py``, its small volume)."""
    return [
        {k: r[k] for k in ("contender", "devices", "temp_mib", "output_mib")}
        for n in sharded.DEVICES
        for r in sharded.measure(sharded.QUICK, sharded.WINDOW, n)
    ]


def unpool_scenario(explicit: bool, window: tuple[int, int, int], placed=True):
    """A SegNet step, pool then unpool with the indices, D over 8; the unpool
    given the pool's windows (``placed``), else the scatter."""
    k, s, p = window
    x = np.random.default_rng(3).standard_normal((2, 4, 64, 16, 16)).astype(np.float32)
    unpool_window = (k, s, p) if placed else ()

    def loss(x):
        values, indices = jaxpool.max_pool3d_with_argmax(x, k, s, p)
        up = jaxpool.max_unpool3d(
            values * 2, indices, *unpool_window, output_size=x.shape
        )
        return jnp.sum(up**2)

    step = jax.jit(jax.value_and_grad(loss))
    want_loss, want_grad = step(x)
    mesh = _mesh((8,), ("d",), explicit)
    sharding = NamedSharding(mesh, P(None, None, "d"))
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, sharding)
        compiled = step.lower(xs).compile()
        got_loss, got_grad = step(xs)
    found = moves(compiled.as_text())
    row = 4 * 2 * 4 * 16 * 16
    return {
        "collectives": sorted({m["op"] for m in found}),
        "beyond_halos": beyond_halos(found, row, k - 1),
        "grad_sharded": got_grad.sharding.is_equivalent_to(sharding, 5),
        "loss_close": bool(np.allclose(got_loss, want_loss, rtol=1e-5)),
        "grad_equal": _same(got_grad, want_grad),
    }


def standalone_scenario(algorithm: str):
    """The standalone backward op of the forward's indices, D over 8 (Auto):
    the gather counts each index within its window and moves halos; the
    scatter honours any index in the plane, so the partitioner gathers the
    plane (the docs' limit)."""
    x = np.random.default_rng(4).standard_normal((2, 4, 64, 16, 16)).astype(np.float32)
    values, indices = jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)
    g = np.random.default_rng(5).integers(-3, 4, values.shape).astype(np.float32)

    def backward(g, i):
        return jaxpool.max_pool3d_with_argmax_backward(
            g, x, i, 3, 2, 1, algorithm=algorithm
        )

    f = jax.jit(backward)
    want = f(g, indices)
    mesh = _mesh((8,), ("d",), False)
    sharding = NamedSharding(mesh, P(None, None, "d"))
    with jax.set_mesh(mesh):
        gs, ins = jax.device_put(g, sharding), jax.device_put(indices, sharding)
        found = moves(f.lower(gs, ins).compile().as_text())
        got = f(gs, ins)
    return {
        "collectives": sorted({m["op"] for m in found}),
        "beyond_halos": beyond_halos(found, 4 * 2 * 4 * 16 * 16, 2),
        "equal": _same(got, want),
        "sharded": got.sharding.is_equivalent_to(sharding, 5),
    }


def limits_scenario(name: str, explicit: bool = False):
    """Windows whose starts are no constant shift of the output rows, on a
    sharded axis: exact, and the partitioner moves more than halos; with
    Explicit axes, the gradient typed like the input. Every other D plane is
    -0.0 and the rest negative, so that many windows' maximum is -0.0, which
    a sum over devices (a partitioned gather's) turns into 0.0."""
    x = np.random.default_rng(6).standard_normal((2, 4, 64, 16, 16)).astype(np.float32)
    x = -np.abs(x)
    x[:, :, ::2] = -0.0
    samples = np.random.default_rng(7).random((2, 4, 3)).astype(np.float32)
    pools = {
        "fractional": lambda x: jaxpool.fractional_max_pool3d(
            x, 2, (32, 8, 8), samples=samples
        ),
        "adaptive of two sizes": lambda x: jaxpool.adaptive_max_pool3d(x, (24, 5, 5)),
    }
    pool = pools[name]
    step = jax.jit(jax.value_and_grad(lambda x: jnp.sum(pool(x)[0] ** 2)))
    forward = jax.jit(pool)
    want, want_forward = step(x), forward(x)
    mesh = _mesh((8,), ("d",), explicit)
    sharding = NamedSharding(mesh, P(None, None, "d"))
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, sharding)
        found = moves(step.lower(xs).compile().as_text())
        got, got_forward = step(xs), forward(xs)
    bad = beyond_halos(found, 4 * 2 * 4 * 16 * 16, 2)
    return {
        "beyond_halos": len(bad),
        "forward_bits": _bits(got_forward, want_forward),
        "negative_zeros": int(np.signbit(np.asarray(want_forward[0])).sum()),
        "grad_equal": _same(got[1], want[1]),
        "grad_sharded": got[1].sharding.is_equivalent_to(sharding, 5),
    }


def explicit_error_scenario():
    """Explicit axes, D over 8, a pooled D of 31: the error names the axis."""
    mesh = _mesh((8,), ("d",), True)
    with jax.set_mesh(mesh):
        x = jax.device_put(
            np.zeros((2, 4, 64, 16, 16), np.float32),
            NamedSharding(mesh, P(None, None, "d")),
        )
        try:
            jax.jit(lambda x: jaxpool.max_pool3d_with_argmax(x, 3, 2))(x)
        except ValueError as e:
            return {"raised": "ValueError", "message": str(e)}
    return {"raised": None}


def planes() -> dict[str, Any]:
    """N and C sharded, with their negative controls, and ``shard_map``."""
    results = {}
    for op in OPS:
        for mesh_kind in ("auto", "explicit"):
            key = f"planes/{op}/{mesh_kind}/auto"
            results[key] = planes_scenario(op, mesh_kind, "auto", "jaxpool")
            try:
                merged_result = planes_scenario(op, mesh_kind, "scatter", "merged")
            except Exception as e:  # Explicit axes reject a bad layout at trace time
                merged_result = {"raised": type(e).__name__, "message": str(e)[:300]}
            results[f"planes/{op}/{mesh_kind}/merged"] = merged_result
        results[f"planes/{op}/shard_map"] = shard_map_scenario(op)
    return results


def spatial() -> dict[str, Any]:
    """Spatial axes sharded: every family and option, Auto and Explicit, the
    exported platforms' forms, the unpool, the standalone backward, the
    limits, the errors and the memory per device."""
    results = {}
    for name in SPATIAL:
        results[f"spatial/{name}/auto"] = spatial_scenario(name, False, "auto")
    for name in EXPLICIT:
        results[f"spatial/{name}/explicit"] = spatial_scenario(name, True, "auto")
    for name in EXPORTED:
        for platform in ("tpu", "cuda"):
            key = f"spatial/{name}/{platform}"
            results[key] = spatial_scenario(name, False, "auto", platform)
    for explicit, window in ((False, (2, 2, 0)), (False, (3, 2, 1)), (True, (3, 2, 1))):
        kind = "explicit" if explicit else "auto"
        key = f"unpool/{kind}/k{window[0]} s{window[1]} p{window[2]}"
        results[key] = unpool_scenario(explicit, window)
    for algorithm in ("gather", "scatter"):
        results[f"standalone/{algorithm}"] = standalone_scenario(algorithm)
    results["unpool/explicit/scatter"] = unpool_scenario(True, (3, 2, 1), False)
    for name in ("fractional", "adaptive of two sizes"):
        results[f"limits/{name}"] = limits_scenario(name)
        results[f"limits/{name}/explicit"] = limits_scenario(name, True)
    results["errors/explicit indivisible"] = explicit_error_scenario()
    results["memory"] = memory_scenario()
    return results


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    (group,) = sys.argv[1:]
    json.dump({"planes": planes, "spatial": spatial}[group](), sys.stdout)


if __name__ == "__main__":
    main()
