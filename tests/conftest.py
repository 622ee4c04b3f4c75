"""The two tiers, strict JAX numerics for every test (warnings are errors: see
pyproject.toml), the kernel forms, and the hypothesis profiles.

``pytest`` runs the quick tier: every public op against the oracle (and torch
when installed) in the CPU's forms, every transformation, the error table and
the layers. ``pytest --full`` adds what is marked ``full``: the other kernel
forms (accelerators', TPU's, Pallas interpreted), the compile-only accelerator
programs, the grids' float16 and float64 rows (``helpers.row_dtypes``) and the
sweeps' full profile. CI runs the full tier. Hypothesis: "quick" (25 examples)
in the quick tier, "ci" (50) in the full one, "thorough" on request
(``pytest tests/test_oracle.py -k "sweep and cpu" --hypothesis-profile=thorough``;
with ``--full`` and ``-k "sweep and tpu"`` the TPU's forms, which the other
profiles sweep with fewer examples)."""

import gc
import os

# Test workers share a machine (pytest -n auto): on a GPU, none may take most
# of its memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The suite runs on the CPU unless told otherwise (``JAX_PLATFORMS=cuda
# pytest ...`` on a GPU, as benchmarks/gpu_check.sh does). With the ``aot``
# extra's libtpu installed, a second JAX process that probes for a TPU fails
# on libtpu's machine-wide lock file, plain CPU runs included, and one that
# builds a compile-only TPU topology does even under JAX_PLATFORMS=cpu: both
# settings reach the workers and the scripts the tests start.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
# Keras picks its backend when first imported, and importing TensorFlow
# imports Keras: jaxpool.keras runs on the JAX backend. TensorFlow's C++ logs
# (oneDNN, CPU features) only to errors.
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import helpers
import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_numpy_rank_promotion", "raise")

# Each new shape compiles, so no deadline; the examples are drawn from a fixed
# seed in CI (derandomize) so a red CI is reproducible.
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=50, derandomize=True, **_COMMON)
settings.register_profile("quick", max_examples=25, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="the full tier: every kernel form, the compile-only accelerator "
        "programs, every dtype (what CI runs)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "full: run only in the full tier (--full)")
    config.addinivalue_line(
        "markers", "forms(which): the kernel forms the seam emits for the test"
    )
    settings.load_profile("ci" if config.getoption("--full") else "quick")


def _param(item) -> str | None:
    """The test's ``form`` parameter, if it has one."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("form") if callspec else None


def _form(item) -> str | None:
    """The kernel forms a test runs under (see ``helpers.use_forms``): its
    ``forms`` mark's (a module of CPU-only features, such as the torch
    comparisons and the layers, marks itself ``forms("cpu")``), or its
    ``form`` parameter's. A test of the CPU's forms
    (``form="cpu"``) emits them alone: its program is the one a CPU user's
    compiles (lowering for one platform keeps that platform's branch alone),
    without tracing the other platforms' forms, which their own tests trace
    and run (a fifth of a grid test's time). On a GPU or TPU host the same
    tests run the platform's own forms (``benchmarks/gpu_check.sh``)."""
    marker = item.get_closest_marker("forms")
    form = marker.args[0] if marker is not None else _param(item)
    if form in ("cpu", "mesh"):  # under a mesh: the CPU's forms there
        return "cpu" if jax.default_backend() == "cpu" else None
    return form if form in ("default", "tpu") else None


def _for_other_platforms(item) -> bool:
    """Whether the test runs a form that no CPU user runs: another platform's
    (the seam's ``"default"`` or ``"tpu"``) or Pallas's kernels interpreted."""
    return _form(item) in ("default", "tpu") or _param(item) == "pallas"


def pytest_collection_modifyitems(config, items):
    """The quick tier leaves out (deselects, never skips) what is marked
    ``full``. The tests of one kernel form are then put together, so that a
    worker clears JAX's caches once per form rather than once per test, and
    switches XLA's optimization once (see :func:`_kernel_forms`)."""
    if not config.getoption("--full"):
        full = [item for item in items if item.get_closest_marker("full")]
        if full:
            config.hook.pytest_deselected(items=full)
            items[:] = [item for item in items if not item.get_closest_marker("full")]
    order = {None: 0, "cpu": 1, "default": 2, "tpu": 3}
    items.sort(key=lambda item: (order[_form(item)], _for_other_platforms(item)))


def pytest_collection_finish(session):
    """Python's cyclic garbage collector, tuned for tracing: every test traces
    and lowers programs, which allocates millions of short-lived objects, and
    each full collection walks every object alive, the modules collection
    imported (JAX, torch, flax) among them. Those are frozen out of the
    collector's view once collected, and it runs less often: its youngest
    generation after 50,000 allocations rather than 700 (garbage is still
    collected). The full tier on this 2-core machine, back to back:
    589 s before, 570 s after; ``tests/test_oracle.py`` and
    ``tests/test_transforms.py``: 51 s, then 48 s."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 1_000)


@pytest.fixture(autouse=True)
def _kernel_forms(request):
    """The forms the test's ``form`` parameter or ``forms`` mark names, else
    the platform's own; for ``form="mesh"`` the platform's own under a mesh
    of one device, which are those that XLA's partitioner splits with halo
    exchanges (``_policy``).

    A form that no CPU user runs is compiled with XLA's optimizations off
    (``jax_disable_most_optimizations``: LLVM at its lowest level; XLA's HLO
    passes run as ever). What those tests check is the form's program, which
    another backend compiles for its users; XLA:CPU's code generation for it
    is beside the point, and costs a quarter of their time. The CPU's own
    forms, what a CPU user runs, keep XLA's defaults."""
    helpers.use_forms(_form(request.node))
    helpers.optimize(not _for_other_platforms(request.node))
    if _param(request.node) != "mesh":
        yield
        return
    # The forms under a mesh (the partitioner's), on one device.
    mesh = jax.make_mesh((1,), ("batch",), devices=jax.devices()[:1])
    with jax.set_mesh(mesh):
        yield


@pytest.fixture
def retrace():
    """JAX's caches cleared before and after the test. The ops are jitted, so a
    test that patches jaxpool's internals must neither reuse programs traced
    without the patch nor leave behind programs traced with it."""
    jax.clear_caches()
    yield
    jax.clear_caches()
