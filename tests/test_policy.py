"""The policy (``jaxpool._policy``) from tables: which algorithm and which
kernel form run, for a pool, a platform and an environment. The rules are
pure functions, so each row states one decision without compiling anything;
``test_compiled`` and ``test_export`` check that the programs follow them."""

import jaxlib.version
import pytest

from jaxpool import _policy
from jaxpool._args import AdaptiveArgs, FractionalArgs, PoolArgs
from jaxpool._fractional_spec import fractional_spec
from jaxpool._policy import (
    COMPACT,
    GATHER,
    GATHERED,
    MATMUL,
    PALLAS,
    PARTITIONED,
    PARTITIONED_REDUCTION,
    REDUCE,
    REDUCTION,
    ROWS,
    SCATTER,
    TAPS,
    TPU,
    Environment,
)
from jaxpool._spec import adaptive_spec, pool_spec
from jaxpool._windows import FractionalSpec

OLD = Environment(jaxlib=(0, 10, 2))  # float scatter-adds are CAS loops on GPUs
NEW = Environment(jaxlib=(0, 11, 1))  # native float atomics
DETERMINISTIC = NEW._replace(xla_flags=(("xla_gpu_deterministic_ops", "true"),))
MESH = NEW._replace(mesh=True)
PALLAS_HOST = NEW._replace(backend="gpu")

SHAPE = (2, 3, 12, 12, 12)
POOLS = {
    "k3 s2 p1": pool_spec("t", 3, SHAPE, PoolArgs(3, 2, 1)),
    "k2 s2": pool_spec("t", 3, SHAPE, PoolArgs(2, 2)),
    "k3 s1 d2": pool_spec("t", 3, SHAPE, PoolArgs(3, 1, 0, 2)),
    "adaptive 12 -> 5": adaptive_spec("t", 3, SHAPE, AdaptiveArgs(5)),
    "adaptive 12 -> 4": adaptive_spec("t", 3, SHAPE, AdaptiveArgs(4)),
    "k7 s1 p3": pool_spec("t", 3, SHAPE, PoolArgs(7, 1, 3)),
    "k3 s1 p1 1-D": pool_spec("t", 1, (2, 3, 12), PoolArgs(3, 1, 1)),
    "k4 s4": pool_spec("t", 3, SHAPE, PoolArgs(4, 4)),
    "k3 s2 p1 gather": pool_spec("t", 3, SHAPE, PoolArgs(3, 2, 1, algorithm="gather")),
    "k3 s2 p1 scatter": pool_spec(
        "t", 3, SHAPE, PoolArgs(3, 2, 1, algorithm="scatter")
    ),
    "k3 s2 p1 pallas": pool_spec(
        "t", 3, SHAPE, PoolArgs(3, 2, 1, implementation="pallas")
    ),
}

# (pool, own indices (the VJP's, with the forward's values), platform,
# environment) -> (algorithm, form)
BACKWARD = [
    # Overlapping windows: the scatter on CPU; on GPU where its adds are
    # native atomics and no determinism flag is set, else the covering
    # reduction of the forward's values; the TPU's dense gather.
    ("k3 s2 p1", True, "cpu", OLD, "scatter", SCATTER),
    ("k3 s2 p1", True, "gpu", OLD, "gather", GATHER),
    ("k3 s2 p1", True, "gpu", NEW, "scatter", SCATTER),
    ("k3 s2 p1", True, "gpu", DETERMINISTIC, "gather", GATHER),
    # Past 8 covering windows, or at stride 1, a GPU's gather is the
    # covering reduction: one window reduction, where the covering sum is a
    # gather per window.
    ("k7 s1 p3", True, "gpu", OLD, "gather", REDUCTION),
    ("k3 s1 d2", True, "gpu", DETERMINISTIC, "gather", REDUCTION),
    ("k3 s1 p1 1-D", True, "gpu", OLD, "gather", REDUCTION),
    ("k3 s2 p1", True, "tpu", NEW, "gather", TPU),
    # Under a mesh every backward of the forward's indices is a deterministic
    # one that XLA's partitioner splits, the scatter's too (the same sum for
    # those indices): the covering reduction per stride phase given the
    # forward's values of regular windows, else the covering sum; a
    # standalone scatter stays the scatter, any index honoured.
    ("k3 s2 p1", True, "tpu", MESH, "gather", PARTITIONED_REDUCTION),
    ("k3 s2 p1", True, "cpu", MESH, "scatter", PARTITIONED_REDUCTION),
    ("k3 s2 p1", True, "gpu", MESH, "scatter", PARTITIONED_REDUCTION),
    ("k3 s2 p1 scatter", True, "gpu", MESH, "scatter", PARTITIONED_REDUCTION),
    ("k3 s2 p1 gather", False, "cpu", MESH, "gather", PARTITIONED),
    ("k3 s2 p1", False, "cpu", MESH, "scatter", SCATTER),
    ("adaptive 12 -> 5", True, "tpu", MESH, "scatter", PARTITIONED),
    ("k3 s2 p1 pallas", True, "gpu", MESH, "gather", PALLAS),
    # Indices from anywhere (a standalone backward op): the scatter.
    ("k3 s2 p1", False, "cpu", NEW, "scatter", SCATTER),
    ("k3 s2 p1", False, "gpu", DETERMINISTIC, "scatter", SCATTER),
    ("k3 s2 p1", False, "tpu", NEW, "scatter", SCATTER),
    # Disjoint windows: the elementwise select, everywhere.
    ("k2 s2", True, "cpu", NEW, "gather", GATHER),
    ("k2 s2", True, "gpu", NEW, "gather", GATHER),
    ("k2 s2", True, "tpu", NEW, "gather", TPU),
    ("adaptive 12 -> 4", True, "cpu", NEW, "gather", GATHER),
    # The TPU's dense form has a term per tap: up to 27 taps (k3 in 3-D);
    # larger windows take the select where disjoint, else the covering
    # reduction, whose program grows with the window's rank.
    ("k4 s4", True, "tpu", NEW, "gather", GATHER),
    ("k7 s1 p3", True, "tpu", NEW, "gather", REDUCTION),
    ("k7 s1 p3", False, "tpu", NEW, "scatter", SCATTER),
    # Dilated and two-size adaptive windows: no dense form on a TPU.
    ("k3 s1 d2", True, "tpu", NEW, "scatter", SCATTER),
    ("adaptive 12 -> 5", True, "tpu", NEW, "scatter", SCATTER),
    ("adaptive 12 -> 5", True, "cpu", NEW, "scatter", SCATTER),
    ("adaptive 12 -> 5", True, "gpu", OLD, "gather", GATHER),
    # The user's algorithm, whatever the platform.
    ("k3 s2 p1 gather", False, "cpu", NEW, "gather", GATHER),
    ("k3 s2 p1 gather", True, "tpu", NEW, "gather", TPU),
    ("k3 s2 p1 scatter", True, "tpu", NEW, "scatter", SCATTER),
    ("k3 s2 p1 scatter", True, "gpu", DETERMINISTIC, "scatter", SCATTER),
    # Pallas's backward is its gather.
    ("k3 s2 p1 pallas", True, "gpu", NEW, "gather", PALLAS),
    ("k3 s2 p1 pallas", True, "cpu", NEW, "gather", PALLAS),
    ("k3 s2 p1 pallas", False, "gpu", NEW, "scatter", SCATTER),
]


@pytest.mark.parametrize(
    "pool, own, platform, env, algorithm, form",
    BACKWARD,
    ids=[
        f"{r[0]}-{'own' if r[1] else 'any'}-{r[2]}-{i}" for i, r in enumerate(BACKWARD)
    ],
)
def test_backward_table(pool, own, platform, env, algorithm, form):
    spec = POOLS[pool]
    chosen = _policy.algorithm(spec, own, platform, env)
    assert chosen == algorithm
    assert _policy.backward_form(spec, chosen, own, platform, env, own) == form


def test_without_the_forwards_values_the_gather_is_the_covering_sum():
    """The covering reduction needs the forward's values (its VJP has them);
    a backward of the forward's own indices without them (the fractional
    pools' spread onto the stride-1 pool) takes the covering sum."""
    spec = POOLS["k3 s2 p1"]
    assert _policy.backward_form(spec, "gather", True, "gpu", OLD, False) == GATHER
    assert _policy.backward_form(spec, "gather", True, "cpu", MESH, False) == (
        PARTITIONED
    )


def test_none_takes_pallas_only_where_measured_and_on_a_gpu_host(monkeypatch):
    spec = POOLS["k3 s2 p1"]
    assert _policy.implementation(spec, "forward", PALLAS_HOST) == "xla"
    monkeypatch.setattr(_policy, "PALLAS_ON_GPU", frozenset({"backward"}))
    assert _policy.implementation(spec, "backward", PALLAS_HOST) == "pallas"
    assert _policy.implementation(spec, "forward", PALLAS_HOST) == "xla"
    assert _policy.implementation(spec, "backward", NEW) == "xla"  # a CPU host
    assert _policy.algorithm(spec, True, "gpu", PALLAS_HOST) == "gather"
    explicit = POOLS["k3 s2 p1 pallas"]
    assert _policy.implementation(explicit, "forward", NEW) == "pallas"


@pytest.mark.parametrize(
    "platform, env, form",
    [
        ("cpu", NEW, "cpu"),
        ("cpu", MESH, REDUCE),
        ("gpu", NEW, REDUCE),
        ("gpu", MESH, REDUCE),
        ("tpu", NEW, COMPACT),
        ("tpu", MESH, COMPACT),
    ],
)
def test_forward_table(platform, env, form):
    """Without a mesh the CPU's form is the scan: it reads the values back at
    the indices, splits a strided minor axis into phases and buffers its
    passes. Everywhere else one variadic window reduction: flat codes on a
    GPU and under a mesh (XLA's partitioner moves only halos), compact ones
    on a TPU."""
    got = _policy.forward_form(POOLS["k3 s2 p1"], platform, env)
    if form != "cpu":
        assert got == form
        return
    assert (got.read_back, got.phases, got.materialize) == (True, True, True)


def test_two_size_adaptive_forward_is_a_reduction_but_on_one_cpu():
    """Adaptive windows of two sizes are reduced one axis at a time on every
    platform but a CPU without a mesh (whose scan in passes runs 1.7x faster
    than the reduction), under a mesh the CPU's copies gathered (quicker to
    compile than the slices), the others' sliced: no gather in an
    accelerator's forward."""
    spec = POOLS["adaptive 12 -> 5"]
    scan = _policy.forward_form(spec, "cpu", NEW)
    assert (scan.read_back, scan.materialize) == (True, True)
    assert _policy.forward_form(spec, "gpu", NEW) == REDUCE
    assert _policy.forward_form(spec, "cpu", MESH) == GATHERED
    assert _policy.forward_form(spec, "gpu", MESH) == REDUCE
    assert _policy.forward_form(spec, "tpu", NEW) == COMPACT


@pytest.mark.parametrize(
    "shape, platform, env, flat",
    [
        ((2, 3, 8, 8), "cpu", NEW, True),
        ((2, 3, 8, 8), "cpu", MESH, False),
        ((2, 3, 8, 8), "gpu", NEW, False),
        ((2, 3, 8, 8), "tpu", NEW, False),
        ((2**16, 2**8, 2**7), "cpu", NEW, False),  # offsets past int32
        ((0, 3, 8, 8), "cpu", NEW, False),
    ],
)
def test_flat_scatter_table(shape, platform, env, flat):
    assert _policy.flat_scatter(shape, platform, env) == flat


def _fractional(algorithm: str) -> FractionalSpec:
    return fractional_spec(
        "t", 2, (2, 3, 12, 12), FractionalArgs(2, (5, 5), algorithm=algorithm)
    )


@pytest.mark.parametrize(
    "algorithm, platform, env, spread, want",
    [
        ("auto", "cpu", OLD, True, ("scatter", ROWS)),
        ("auto", "gpu", OLD, True, ("gather", ROWS)),
        ("auto", "gpu", NEW, True, ("scatter", ROWS)),
        ("auto", "gpu", DETERMINISTIC, False, ("gather", ROWS)),
        ("auto", "tpu", NEW, True, ("gather", MATMUL)),
        ("auto", "tpu", NEW, False, ("gather", ROWS)),  # the sort: no rows
        ("scatter", "tpu", NEW, True, ("scatter", ROWS)),
        ("gather", "cpu", NEW, True, ("gather", ROWS)),
    ],
)
def test_fractional_table(algorithm, platform, env, spread, want):
    spec = _fractional(algorithm)
    assert _policy.fractional_backward_form(spec, platform, spread, env) == want


def test_fractional_forward_forms():
    assert [_policy.fractional_forward_form(p) for p in _policy.PLATFORMS] == [
        TAPS,
        ROWS,
        MATMUL,
    ]


@pytest.mark.parametrize(
    "xla_flags, jaxlib, scatter",
    [
        ("", (0, 10, 2), False),
        ("", (0, 11, 1), True),
        ("--xla_gpu_deterministic_ops", (0, 11, 1), False),
        ("--xla_gpu_deterministic_ops=true", (0, 11, 1), False),
        ("--xla_gpu_deterministic_ops=false", (0, 11, 1), True),
        (
            "--xla_gpu_deterministic_ops=1 --xla_gpu_deterministic_ops=0",
            (1, 0, 0),
            True,
        ),
        ("--xla_gpu_exclude_nondeterministic_ops=true", (0, 11, 1), False),
        ("--xla_backend_extra_options=-nvptx-allow-ftz-atomics", (0, 10, 2), True),
        ("--xla_backend_extra_options=-foo,-nvptx-allow-ftz-atomics", (0, 10, 2), True),
        ("--xla_backend_extra_options=-nvptx-allow-ftz-atomicsx", (0, 10, 2), False),
    ],
)
def test_gpu_rule(xla_flags, jaxlib, scatter):
    """The installed jaxlib, LLVM's option for native float atomics, XLA's
    determinism flags (bare, ``=true``/``=1``, the last occurrence winning)."""
    env = Environment(jaxlib, _policy.parse_flags(xla_flags))
    assert _policy.gpu_scatter(env) == scatter


def test_environment_is_read_when_traced(monkeypatch):
    """``XLA_FLAGS`` and the jaxlib as they are when a program is traced
    (the backend is started first: XLA reads the flags once, and would refuse
    these)."""
    assert _policy.environment(False).backend == "cpu"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops --a=b")
    monkeypatch.setattr(_policy, "JAXLIB", (9, 9, 9))
    env = _policy.environment(True)
    assert env.xla_flags == (("xla_gpu_deterministic_ops", "true"), ("a", "b"))
    assert env.jaxlib == (9, 9, 9) and env.mesh and env.backend == "cpu"


def test_jaxlib_version_is_read():
    assert _policy.release(jaxlib.version.__version__) == _policy.JAXLIB
    assert _policy.release("0.11.1.dev20261101") == (0, 11, 1)
    assert _policy.release("0.12.0rc1") == (0, 12, 0)
