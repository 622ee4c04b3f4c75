"""Strict JAX numerics for every test (warnings are errors: see pyproject.toml),
and the hypothesis profiles: "ci" by default, "thorough" on request
(``pytest tests/test_properties.py --hypothesis-profile=thorough``)."""

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

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_numpy_rank_promotion", "raise")

# Each new shape compiles, so no deadline; the examples are drawn from a fixed
# seed in CI (derandomize) so a red CI is reproducible.
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=100, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile("ci")


@pytest.fixture
def retrace():
    """JAX's caches cleared before and after the test. The ops are jitted, so a
    test that patches jaxpool's internals must neither reuse programs traced
    without the patch nor leave behind programs traced with it."""
    jax.clear_caches()
    yield
    jax.clear_caches()
