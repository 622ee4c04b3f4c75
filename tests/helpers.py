"""Shared test helpers: dtypes and their tolerances, discriminating inputs, torch."""

from __future__ import annotations

import contextlib
import os
import zlib

import jax
import jax.extend
import ml_dtypes
import numpy as np
import pytest

from jaxpool import verify

NO_SKIP = os.environ.get("JAXPOOL_NO_SKIP") == "1"

DTYPES = ["float16", "bfloat16", "float32", "float64"]
INPUT_KINDS = ["random", "ties", "nan", "inf"]

# One rounding of each dtype: the tolerance for gradients that may be summed in
# another order than the reference's (relative, on top of an absolute floor).
RTOL = {"float16": 2**-10, "bfloat16": 2**-7, "float32": 2**-22, "float64": 2**-50}


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def precision(name: str):
    """Context in which JAX keeps ``name`` (float64 needs x64)."""
    return jax.enable_x64(True) if name == "float64" else contextlib.nullcontext()


def rng_for(*key: str) -> np.random.Generator:
    """A generator seeded by the test's parameters, the same in every run."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def require(module: str):
    """Import an optional test dependency, or skip (fail under JAXPOOL_NO_SKIP=1)."""
    try:
        return __import__(module)
    except ImportError as e:
        reason = f"optional dependency {module!r} is not installed ({e})"
        if NO_SKIP:
            pytest.fail(f"{reason}; JAXPOOL_NO_SKIP=1 forbids skipping")
        pytest.skip(reason)


def make_input(rng: np.random.Generator, shape, dtype: str, kind: str) -> np.ndarray:
    """Inputs built to discriminate between right and wrong selection rules.

    random: distinct normal values. ties: small integers, so most windows hold
    a tied maximum. nan: ties plus ~30% NaN, so many windows hold several NaNs.
    inf: mostly -inf with some +inf and small integers, so there are windows of
    only -inf (with padding around them) and windows whose max is +inf.
    """
    size = int(np.prod(shape))
    if kind == "random":
        x = rng.standard_normal(size)
    elif kind == "ties":
        x = rng.integers(-2, 3, size).astype(np.float64)
    elif kind == "nan":
        x = rng.integers(-2, 3, size).astype(np.float64)
        x[rng.random(size) < 0.3] = np.nan
    elif kind == "inf":
        x = rng.choice([-np.inf, -np.inf, -np.inf, np.inf, -1.0, 0.0, 2.0], size)
    else:
        raise ValueError(kind)
    return x.reshape(shape).astype(np_dtype(dtype))


def cotangent(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Small-integer cotangents: their sums are exact in every dtype."""
    return rng.integers(-3, 4, shape).astype(np_dtype(dtype))


def assert_same(actual, expected, what: str = "") -> None:
    """Bitwise equality (NaN equal to NaN), with the first mismatch reported."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, (what, a.shape, e.shape)
    assert a.dtype == e.dtype, (what, a.dtype, e.dtype)
    af, ef = a.astype(np.float64), e.astype(np.float64)
    same = (af == ef) | (np.isnan(af) & np.isnan(ef))
    if not same.all():
        where = tuple(int(i) for i in np.argwhere(~same)[0])
        pytest.fail(
            f"{what}: {(~same).sum()} mismatches, first at {where}: "
            f"{a[where]!r} != {e[where]!r}"
        )


def assert_close(actual, expected, dtype: str, what: str = "") -> None:
    """Within one rounding of ``dtype`` of a float64 reference."""
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected).astype(np.float64)
    np.testing.assert_allclose(a, e, rtol=RTOL[dtype], atol=RTOL[dtype], err_msg=what)


def to_torch(torch, x: np.ndarray):
    if x.dtype == np_dtype("bfloat16"):
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(x))  # a writable, contiguous copy


def from_torch(torch, t) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(np_dtype("bfloat16"))
    return t.numpy()


def check_against_oracle(forward, backward, x, want, nd, rng, dtype) -> None:
    """Forward values/indices and every gradient path equal the oracle, bitwise.

    ``forward(x) -> (values, indices)`` and ``backward(g, x, indices)`` are the
    op's; ``want`` is the oracle's ``(values, indices)``. Small-integer
    cotangents sum exactly, so the gradient is compared exactly too
    (``jaxpool.verify.compare``, the routine ``python -m jaxpool.verify`` runs).
    """
    g = cotangent(rng, want[0].shape, dtype)
    checks = verify.compare(forward, backward, x, want, g, nd, exact=True).checks
    failed = [f"{c.name}: {c.error:g} {c.where}" for c in checks if not c.passed]
    assert not failed, failed


@contextlib.contextmanager
def platform_forms(which: str):
    """Every kernel in its ``which`` (``"cpu"``, ``"tpu"`` or ``"default"``,
    the other accelerators') form, whatever the platform: the seam's
    ``by_platform`` emits that form alone (a TPU without a form of its own
    takes the default). JAX's caches are cleared on entry and exit, so no
    program traced inside is reused outside, nor the other way round."""
    from jaxpool import _platform

    original = _platform.by_platform

    def by_platform(emit, *args, **forms):
        form = forms.get(which)
        return emit(forms["default"] if form is None else form)(*args)

    jax.clear_caches()
    _platform.by_platform = by_platform
    try:
        yield
    finally:
        _platform.by_platform = original
        jax.clear_caches()


def count_primitive(closed_jaxpr, name: str) -> int:
    """How many equations of primitive ``name`` a jaxpr holds, sub-jaxprs
    (jitted calls, loop and branch bodies) included."""

    def walk(jaxpr) -> int:
        count = 0
        for eqn in jaxpr.eqns:
            count += eqn.primitive.name == name
            for param in eqn.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        count += walk(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        count += walk(sub)
        return count

    return walk(closed_jaxpr.jaxpr)
