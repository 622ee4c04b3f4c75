"""SPMD over 8 host devices: sharding N and C moves nothing, sharding spatial
axes moves only halos, and every result equals one device's.

The scenarios run in a subprocess (tests/sharding_main.py), since the device
count flag only takes effect before JAX starts; each reads its compiled
program's collectives. Explicit axes' types are checked here too, on one
device: a type that shards a spatial axis is one whatever the device count.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpool

MAIN = Path(__file__).resolve().parent / "sharding_main.py"
OPS = ["max_pool3d", "adaptive_max_pool2d"]
MESHES = ["auto", "explicit"]


def _run(group: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run = subprocess.run(
        [sys.executable, str(MAIN), group],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def planes():
    """N and C sharded: the quick tier's scenarios (about 15 s)."""
    return _run("planes")


@pytest.fixture(scope="module")
def spatial():
    """Spatial axes sharded: the full tier's (about a minute)."""
    return _run("spatial")


# The full tier's mark: the spatial scenarios, and Explicit axes' types.
FULL = pytest.mark.full


def _keys(results, prefix):
    keys = [k for k in results if k.startswith(prefix)]
    assert keys, prefix
    return keys


# ------------------------------------------------------------- N and C


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("op", OPS)
def test_sharded_train_step_moves_no_arrays(planes, op, mesh):
    """Under a mesh ``jax.grad`` runs one backward whatever the algorithm
    (``_policy.backward_form``), so one algorithm's step stands for both."""
    r = planes[f"planes/{op}/{mesh}/auto"]
    assert r["array_traffic"] == []
    assert set(r["collectives"]) <= {"all-reduce"}  # the scalar loss only
    assert r["x_sharded"] and r["grad_sharded"] and r["grad_shards"] == 8
    assert r["loss_close"] and r["grad_equal"]  # the numbers of one device


@pytest.mark.parametrize("op", OPS)
def test_negative_control_merged_planes_are_flagged(planes, op):
    # Auto axes: the same check sees the arrays move.
    auto = planes[f"planes/{op}/auto/merged"]
    assert auto["array_traffic"], "the checker missed a merged N*C scatter"
    assert {"all-gather"} <= set(auto["collectives"])
    assert not auto["grad_sharded"]
    # Explicit axes: the bad layout is refused at trace time instead.
    assert planes[f"planes/{op}/explicit/merged"]["raised"] == "ShardingTypeError"


@pytest.mark.parametrize("op", OPS)
def test_shard_map(planes, op):
    r = planes[f"planes/{op}/shard_map"]
    assert r["collectives"] == [] and r["equal"]


# ---------------------------------------------------------- spatial axes


@FULL
def test_spatially_sharded_steps_move_only_halos(spatial):
    """Every pool (1-3-D, padding, ceil_mode, dilation, channels-last, axes
    reduced in passes, adaptive windows of an integer ratio), its VJP, with
    one spatial axis sharded, two, or N beside one; Auto and Explicit axes;
    in the CPU's forms and, exported for a TPU and a GPU and run here, in
    theirs: collective-permutes no wider than the windows' overlap, scalar
    all-reduces; the gradient and the values sharded as the input; values
    and indices bit for bit one device's, the gradient one device's
    deterministic sum, to the bit."""
    keys = _keys(spatial, "spatial/")
    assert {k.rsplit("/", 1)[1] for k in keys} == {"auto", "explicit", "tpu", "cuda"}
    for key in keys:
        r = spatial[key]
        assert r["beyond_halos"] == [], (key, r["beyond_halos"])
        assert set(r["collectives"]) <= {"collective-permute", "all-reduce"}, key
        assert r["grad_sharded"] and r["values_sharded"], key
        assert r["forward_equal"] and r["grad_equal"] and r["loss_close"], key
    # Where windows meet a shard edge there are halos; where they tile the
    # shards (k2 s2 over D of 64, k4 s4 over L of 512) nothing moves.
    assert (
        "collective-permute"
        in spatial["spatial/3-D k3 s2 p1, D over 8/auto"]["collectives"]
    )
    assert spatial["spatial/1-D k4 s4, L over 8/auto"]["collectives"] == ["all-reduce"]


@FULL
def test_the_checker_sees_more_than_halos(spatial):
    """The negative controls of the halo check: the standalone scatter, which
    honours any index in the plane, and windows whose starts are no constant
    shift of the output rows, move more than halos (the docs' limits); they
    still equal one device, their forward bit for bit where maxima are -0.0
    (which a partitioned gather's sum over devices turns into 0.0)."""
    scatter = spatial["standalone/scatter"]
    assert scatter["beyond_halos"] and scatter["equal"]
    for name in ("fractional", "adaptive of two sizes"):
        for key in (f"limits/{name}", f"limits/{name}/explicit"):
            r = spatial[key]
            assert r["beyond_halos"] > 0 and r["grad_equal"], key
            assert r["forward_bits"] and r["negative_zeros"] > 0, key


@FULL
def test_standalone_gather_backward_moves_only_halos(spatial):
    """The deterministic backward op counts each index within its window, as
    the forward's indices always lie: halos only, sharded like its input."""
    r = spatial["standalone/gather"]
    assert r["beyond_halos"] == [] and r["equal"] and r["sharded"]


@FULL
def test_unpool_with_the_pools_windows_moves_only_halos(spatial):
    """A SegNet step (pool, then unpool with the pool's kernel_size, stride
    and padding) with D sharded: each value placed within its window, its
    gradient read there; Auto and Explicit axes."""
    for key in _keys(spatial, "unpool/"):
        if key.endswith("/scatter"):
            continue
        r = spatial[key]
        assert r["beyond_halos"] == [], (key, r["beyond_halos"])
        assert r["grad_sharded"] and r["grad_equal"] and r["loss_close"], key


@FULL
def test_explicit_axes_run_where_the_partitioner_gathers(spatial):
    """Explicit axes over D where jaxpool's forms are not halo-only (the
    fractional pool, adaptive windows of two sizes, the unpool without the
    pool's windows, a scatter): the step still runs, equals one device, and
    returns its gradient typed and sharded like its input."""
    for key in ("limits/fractional/explicit", "limits/adaptive of two sizes/explicit"):
        r = spatial[key]
        assert r["grad_equal"] and r["grad_sharded"], key
    r = spatial["unpool/explicit/scatter"]
    assert r["grad_equal"] and r["grad_sharded"] and r["loss_close"], r


@FULL
def test_explicit_axes_name_the_axis_that_does_not_divide(spatial):
    r = spatial["errors/explicit indivisible"]
    assert r["raised"] == "ValueError"
    message = r["message"]
    assert message.startswith("max_pool3d_with_argmax: the output has 31 positions")
    assert "mesh axes ('d',)" in message and "Auto axes" in message


@FULL
def test_memory_per_device_falls_and_stays_below_the_builtins(spatial):
    """A volume split along D over 1, 2, 4 and 8 devices: per device, the
    step's temporaries and outputs fall as devices are added, and stay at
    most ``jax.grad`` through ``lax.reduce_window``'s."""
    rows = spatial["memory"]
    devices = sorted({r["devices"] for r in rows})
    assert devices == [1, 2, 4, 8]

    def mib(contender, n):
        (r,) = [r for r in rows if r["contender"] == contender and r["devices"] == n]
        return r["temp_mib"] + r["output_mib"]

    ours = [mib("jaxpool", n) for n in devices]
    assert ours == sorted(ours, reverse=True) and ours[-1] < ours[0] / 4, ours
    for n in devices:
        assert mib("jaxpool", n) <= mib("reduce_window", n), n


# ------------------------------------------------- Explicit axes' types

SAMPLES = np.random.default_rng(1).random((2, 3, 3)).astype(np.float32)


EXPLICIT_FAMILIES = {
    "max_pool3d": lambda x: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)[0],
    "max_pool2d": lambda x: jaxpool.max_pool2d_with_argmax(
        x.reshape(2, 3, 48, 6), 3, 2, 1
    )[0],
    "max_pool1d": lambda x: jaxpool.max_pool1d_with_argmax(x.reshape(2, 3, 288), 4)[0],
    "adaptive_max_pool3d": lambda x: jaxpool.adaptive_max_pool3d(x, (3, 4, 5))[0],
    "fractional_max_pool3d": lambda x: jaxpool.fractional_max_pool3d(
        x, 2, (4, 3, 3), samples=SAMPLES
    )[0],
    "fractional_max_pool2d": lambda x: jaxpool.fractional_max_pool2d(
        x.reshape(2, 3, 48, 6), 2, (3, 3), samples=SAMPLES[..., :2]
    )[0],
    "max_unpool3d": lambda x: jaxpool.max_unpool3d(
        *jaxpool.max_pool3d_with_argmax(x, 2), output_size=x.shape
    ),
    "max_unpool3d with the pool's windows": lambda x: jaxpool.max_unpool3d(
        *jaxpool.max_pool3d_with_argmax(x, 3, 2, 1), 3, 2, 1, output_size=x.shape
    ),
    **{
        f"max_pool3d_with_argmax_backward {a}": (
            lambda x, a=a: jaxpool.max_pool3d_with_argmax_backward(
                x[:, :, :4, :3, :3],
                x,
                jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)[1],
                3,
                2,
                1,
                algorithm=a,
            )
        )
        for a in ("scatter", "gather")
    },
    "adaptive_max_pool3d_backward": lambda x: jaxpool.adaptive_max_pool3d_backward(
        x[:, :, :3, :4, :5], x, jaxpool.adaptive_max_pool3d(x, (3, 4, 5))[1]
    ),
    "fractional_max_pool3d_backward": lambda x: jaxpool.fractional_max_pool3d_backward(
        x[:, :, :4, :3, :3],
        x,
        jaxpool.fractional_max_pool3d(x, 2, (4, 3, 3), samples=SAMPLES)[1],
    ),
}


@FULL
@pytest.mark.parametrize("family", EXPLICIT_FAMILIES)
def test_explicit_axes_over_a_spatial_axis_type_every_result(family):
    """Every op family, its gradient and its gradient's gradient, with an
    Explicit mesh axis typing D: each runs (the kernels with the axes Auto,
    ``_mesh.auto_axes_for``), returns the numbers of the step without a mesh
    and its gradient typed like its input. A kernel that reads or scatters
    at flat plane offsets under the types fails with JAX's
    ``ShardingTypeError`` instead."""
    op = EXPLICIT_FAMILIES[family]
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 6, 6)).astype(np.float32)

    def loss(x):
        return jnp.sum(op(x) ** 2)

    def second(x):
        return jnp.sum(jax.grad(loss)(x) * x)

    step = jax.jit(lambda x: (jax.value_and_grad(loss)(x), jax.grad(second)(x)))
    (want_loss, want_grad), want_second = step(x)
    mesh = jax.make_mesh((1,), ("d",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P(None, None, "d")))
        (loss_, grad), second_ = step(xs)
        assert jax.typeof(grad).sharding.spec[2] == "d"
    assert_same(grad, want_grad, "grad")
    assert_same(second_, want_second, "grad of grad")
    np.testing.assert_allclose(loss_, want_loss, rtol=1e-5)  # a sum, reordered
