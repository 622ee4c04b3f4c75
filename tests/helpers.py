"""Shared test helpers: dtypes and their tolerances, discriminating inputs, the
kernel forms, the one oracle comparison, torch."""

from __future__ import annotations

import contextlib
import itertools
import os
import zlib

import jax
import jax.extend
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from cases import DTYPES, INPUT_KINDS

import jaxpool
from jaxpool import _platform, reference, verify

NO_SKIP = os.environ.get("JAXPOOL_NO_SKIP") == "1"

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


def optional(module: str):
    """Import an optional dependency for a comparison beside the oracle's:
    ``None`` without it, so the test checks what it can (a failure under
    JAXPOOL_NO_SKIP=1, where every comparison must run)."""
    try:
        return __import__(module)
    except ImportError as e:
        if NO_SKIP:
            pytest.fail(
                f"optional dependency {module!r} is not installed ({e}); "
                "JAXPOOL_NO_SKIP=1 forbids leaving its comparison out"
            )
        return None


def make_input(rng: np.random.Generator, shape, dtype: str, kind: str) -> np.ndarray:
    """Inputs built to discriminate between right and wrong selection rules.

    random: distinct normal values. ties: small integers, so most windows hold
    a tied maximum, their zeros of both signs (-0.0 at odd positions: it ties
    with +0.0). nan: ties plus ~30% NaN, so many windows hold several NaNs.
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
    if kind in ("ties", "nan"):
        x = _signed_zeros(x)
    return x.reshape(shape).astype(np_dtype(dtype))


def _signed_zeros(x: np.ndarray) -> np.ndarray:
    """``x`` with its zeros at odd flat positions made -0.0."""
    odd = np.arange(x.size).reshape(x.shape) % 2 == 1
    return np.where((x == 0) & odd, -0.0, x)


def cotangent(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Small-integer cotangents: their sums are exact in every dtype. Their
    zeros are of both signs: the spec's gradient (zeros, then each window's
    added) is +0.0 where only -0.0 gradients land."""
    return _signed_zeros(rng.integers(-3, 4, shape).astype(np.float64)).astype(
        np_dtype(dtype)
    )


def assert_same(actual, expected, what: str = "", signed_zeros: bool = True) -> None:
    """Bitwise equality (NaN equal to NaN, -0.0 not +0.0), with the first
    mismatch reported. ``signed_zeros=False`` takes -0.0 as +0.0, for what the
    spec leaves unsigned: derivatives of the backward, taken in two orders
    (``0 * -w`` in one, ``0 * w`` in the other)."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, (what, a.shape, e.shape)
    assert a.dtype == e.dtype, (what, a.dtype, e.dtype)
    same = ~verify._differ(a, e, signed_zeros)
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


def row_dtypes(row: int) -> list[tuple[str, tuple]]:
    """A table row's dtypes in the CPU's forms, with their marks: float32 and
    bfloat16 in the quick tier, and in the full one float16 on even rows and
    float64 on odd ones. Each dtype meets every row or every other row, at
    half the cost of every dtype on every row."""
    wide = ("float16", "float64")[row % 2]
    return [
        (dtype, (pytest.mark.full,) if dtype == wide else ())
        for dtype in DTYPES
        if dtype in ("bfloat16", "float32", wide)
    ]


# The kernel forms the oracle tests run, each as a test parameter ``form``:
# the CPU's own, the other accelerators' ("default"), the TPU's, and the Pallas
# kernels in Pallas's interpreter. Only the CPU's are in the quick tier.
FORMS = [
    "cpu",
    pytest.param("default", marks=pytest.mark.full),
    pytest.param("tpu", marks=pytest.mark.full),
    pytest.param("pallas", marks=pytest.mark.full),
]
_forms: list[str | None] = [None]  # the forms the seam now emits; None: its own
_BY_PLATFORM = _platform.by_platform  # the seam's own


def use_forms(which: str | None) -> None:
    """Make the seam's ``by_platform`` emit the ``which`` form (``"cpu"``,
    ``"tpu"`` or ``"default"``, the other accelerators') whatever the
    platform, or the platform's own for ``None``; a TPU without a form of its
    own takes the default. JAX's caches are cleared whenever the forms change,
    so that no program traced under one is reused under another (and only
    then: tests of one form that follow each other share their programs)."""
    if which == _forms[0]:
        return

    def by_platform(emit, *args, **forms):
        form = forms.get(which)
        return emit(forms["default"] if form is None else form)(*args)

    jax.clear_caches()
    _platform.by_platform = _BY_PLATFORM if which is None else by_platform
    _forms[0] = which


def optimize(on: bool) -> None:
    """Compile with XLA's optimizations on (its defaults) or off. JAX's caches
    are cleared whenever this changes, as in :func:`use_forms`: its programs
    are cached without it in their key."""
    off = not on
    if jax.config.read("jax_disable_most_optimizations") == off:
        return
    jax.clear_caches()
    jax.config.update("jax_disable_most_optimizations", off)


@contextlib.contextmanager
def platform_forms(which: str | None):
    """:func:`use_forms` for a block, then the forms of before."""
    before = _forms[0]
    use_forms(which)
    try:
        yield
    finally:
        use_forms(before)


def form_options(form: str) -> dict:
    """The ops' keyword arguments for a test's ``form`` (the Pallas kernels are
    an ``implementation``; the others are the seam's, see :func:`use_forms`)."""
    return dict(implementation="pallas") if form == "pallas" else {}


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


def make_planes(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Every input kind of :func:`make_input`, one after another along the
    first axis: the planes of one call, so that a configuration meets every
    kind in one program."""
    parts = [make_input(rng, shape, dtype, kind) for kind in INPUT_KINDS]
    return np.concatenate(parts, axis=0)


def _per_axis(value, nd: int, default=None):
    if value is None or (isinstance(value, (tuple, list)) and len(value) == 0):
        return default
    if isinstance(value, int):
        return (value,) * nd
    return tuple(value) * nd if len(value) == 1 else tuple(value)


def pool_oracle(
    x, nd, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False
):
    """The oracle's pool for the op's keyword arguments."""
    k = _per_axis(kernel_size, nd)
    return reference.max_pool(
        x,
        k,
        _per_axis(stride, nd, k),
        _per_axis(padding, nd),
        _per_axis(dilation, nd),
        ceil_mode,
    )


def adaptive_oracle(x, nd, output_size):
    """The oracle's adaptive pool (``None`` entries keep the input's size)."""
    spatial = x.shape[x.ndim - nd :]
    full = _per_axis(output_size, nd)
    full = tuple(s if o is None else o for s, o in zip(spatial, full, strict=True))
    return reference.adaptive_max_pool(x, full)


def pool_ops(nd: int, kwargs: dict):
    """``(forward, backward)`` of ``max_pool{nd}d`` with ``kwargs``, in the
    form :func:`check_against_oracle` takes."""
    fwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    bwd = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    return (lambda x: fwd(x, **kwargs)), (
        lambda g, x, i, **k: bwd(g, x, i, **kwargs, **k)
    )


def adaptive_ops(nd: int, output_size, options: dict):
    """``(forward, backward)`` of ``adaptive_max_pool{nd}d``."""
    fwd = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    bwd = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    return (
        lambda x: fwd(x, output_size, **options),
        lambda g, x, i, **k: bwd(g, x, i, **options, **k),
    )


def fractional_ops(nd: int, kernel, output_size, samples, options: dict):
    """``(forward, backward)`` of ``fractional_max_pool{nd}d`` with
    ``samples``."""
    fwd = getattr(jaxpool, f"fractional_max_pool{nd}d")
    bwd = getattr(jaxpool, f"fractional_max_pool{nd}d_backward")
    return (
        lambda x: fwd(x, kernel, output_size, samples=samples, **options),
        lambda g, x, i, **k: bwd(g, x, i, **options, **k),
    )


def check_pool(nd, shape, kwargs, rng, dtype, **options) -> None:
    """``max_pool{nd}d`` with ``kwargs`` against the oracle, bit for bit, on
    every input kind at once (``options``: more keyword arguments)."""
    x = make_planes(rng, shape, dtype)
    forward, backward = pool_ops(nd, {**kwargs, **options})
    want = pool_oracle(x, nd, **kwargs)
    check_against_oracle(forward, backward, x, want, nd, rng, dtype)


def check_adaptive(nd, shape, output_size, rng, dtype, **options) -> None:
    """``adaptive_max_pool{nd}d`` against the oracle, as :func:`check_pool`."""
    x = make_planes(rng, shape, dtype)
    forward, backward = adaptive_ops(nd, output_size, options)
    want = adaptive_oracle(x, nd, output_size)
    check_against_oracle(forward, backward, x, want, nd, rng, dtype)


def check_drawn(case: dict, **options) -> tuple:
    """A drawn case of ``cases.pool_cases``, ``cases.fractional_cases`` or
    ``cases.adaptive_cases`` in its layout against the oracle, bit for bit;
    returns the oracle's result."""
    nd, cl, dtype = case["nd"], case["channels_last"], case["dtype"]
    rng = np.random.default_rng(case["seed"])
    x = make_input(rng, case["shape"], dtype, case["kind"])
    kw = dict(channels_last=cl, **options)
    if "kernel" in case and "output_size" in case:  # fractional
        kernel, out = case["kernel"], case["output_size"]
        samples = fractional_samples(rng, case["shape"], nd, dtype)
        forward, backward = fractional_ops(nd, kernel, out, samples, kw)
        planes = samples[0] if len(case["shape"]) == nd + 1 else samples
        want = fractional_oracle(x, kernel, planes, out)
    elif "kernel" in case:
        args = dict(
            kernel_size=case["kernel"],
            stride=case["stride"],
            padding=case["padding"],
            dilation=case["dilation"],
            ceil_mode=case["ceil_mode"],
        )
        forward, backward = pool_ops(nd, {**args, **kw})
        want = pool_oracle(x, nd, **args)
    else:
        forward, backward = adaptive_ops(nd, case["output_size"], kw)
        want = adaptive_oracle(x, nd, case["output_size"])
    if cl:  # the op sees channels-last arrays, the comparison channels-first
        fwd, bwd = forward, backward

        def first(a):
            return jnp.moveaxis(a, -1, -nd - 1)

        def last(a):
            return jnp.moveaxis(a, -nd - 1, -1)

        def forward(x):
            return tuple(map(first, fwd(last(x))))

        def backward(g, x, i, **k):
            return first(bwd(last(g), last(x), last(i), **k))

    check_against_oracle(forward, backward, x, want, nd, rng, dtype)
    return want


# The entry of PyTorch's fractional samples that drives each spatial axis (D,
# H, W order): its 2-D kernel reads (W, H), its 3-D kernel (D, H, W).
SAMPLE_AXIS = {2: (1, 0), 3: (0, 1, 2)}


def fractional_samples(rng: np.random.Generator, shape, nd: int, dtype: str):
    """Uniform samples ``(N, C, nd)`` for an input of ``shape`` (``(1, C,
    nd)`` for an unbatched one), in ``dtype``."""
    lead = (1, shape[0]) if len(shape) == nd + 1 else shape[:2]
    return rng.random((*lead, nd)).astype(np_dtype(dtype))


def fractional_oracle(x, kernel, samples, out):
    """The oracle's fractional pool, the starts drawn from PyTorch-ordered
    ``samples`` ``(N, C, nd)``."""
    nd = len(kernel)
    spatial = x.shape[x.ndim - nd :]
    starts = [
        reference.fractional_starts(samples[..., SAMPLE_AXIS[nd][a]], *sizes)
        for a, sizes in enumerate(zip(spatial, out, kernel, strict=True))
    ]
    return reference.fractional_max_pool(x, kernel, starts)


def torch_fractional_pool(torch, nd: int, x, kernel, out, samples):
    """PyTorch's ``fractional_max_pool{nd}d`` of the tensor ``x`` from
    ``samples`` (NumPy, ``(N, C, nd)``): its ``(values, indices)``."""
    pool = getattr(torch.nn.functional, f"fractional_max_pool{nd}d")
    return pool(
        x, kernel, out, return_indices=True, _random_samples=to_torch(torch, samples)
    )


def compare_torch(torch, forward, torch_forward, backward, x, nd, rng, dtype) -> None:
    """Values and indices identical to torch's; gradients within rounding.

    ``forward(x)`` and ``backward(g, x, indices, **kw)`` are jaxpool's,
    ``torch_forward(xt)`` torch's ``(values, indices)``. The comparison is
    ``jaxpool.verify.compare`` with torch's values and indices as the wanted
    ones (the gradient through ``jax.vjp``, the backward op and the gather
    backward against a float64 scatter at them, within the bound of
    accumulating and rounding once), and besides: the backward op driven by
    torch's own int64 indices equals the gradient, and the gradient is within
    one rounding of torch's (float32, float64) or of a float64 scatter (16-bit:
    torch's CPU backward accumulates in 16 bits).
    """
    xt = to_torch(torch, x).requires_grad_()
    tv, ti = torch_forward(xt)
    g = rng.standard_normal(tv.shape).astype(np_dtype(dtype))
    # torch's CPU backward does not bounds-check: an out-of-plane index writes
    # into the next plane (or past the buffer). We drop it (docs/semantics.md),
    # so compare such gradients with the oracle only, and never run torch's
    # backward there.
    spatial = x.shape[x.ndim - nd :]
    in_plane = bool((ti < np.prod(spatial)).all())
    if in_plane:
        tv.backward(to_torch(torch, g))
    want = (from_torch(torch, tv), ti.numpy().astype(np.int32))
    outcome = verify.compare(forward, backward, x, want, g, nd, exact=False)
    failed = [
        f"{c.name}: {c.error:g} {c.where}" for c in outcome.checks if not c.passed
    ]
    assert not failed, failed
    with precision(dtype):
        # Indices straight from torch (int64) drive our backward to the same place.
        standalone = backward(g, x, ti.numpy())
    assert_same(standalone, outcome.grad, "backward from torch's indices")
    if in_plane and dtype in ("float32", "float64"):
        assert_close(outcome.grad, from_torch(torch, xt.grad), dtype, "grad vs torch")
    else:
        exact = reference.scatter_add(g, ti.numpy(), spatial)
        assert_close(outcome.grad, exact, dtype, "grad vs float64 scatter")


def lowered(f, args: tuple, platform: str) -> str:
    """The StableHLO text of ``jit(f)`` lowered for ``platform``."""
    return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def tf_pool_oracle(x: np.ndarray, ksize, strides, padding: str, channels_last=True):
    """TensorFlow's CPU ``max_pool_with_argmax`` as a for-loop, over any
    number of spatial axes: per window, its in-bounds elements in row-major
    order from the first, which is replaced when ``current < candidate``
    (never by NaN, and a NaN first element never). ``x`` is ``(N, *S, C)``
    (``(N, C, *S)`` when not ``channels_last``); ``ksize`` and ``strides``
    one int per spatial axis; ``padding`` "SAME" (the odd element after) or
    "VALID". Returns ``(values, indices)``: the indices are each chosen
    element's flat offset in its image as laid out, without the batch."""
    if not channels_last:
        x = np.moveaxis(x, 1, -1)
    n, *spatial, c = x.shape
    pads, outs = [], []
    for size, k, s in zip(spatial, ksize, strides, strict=True):
        out = -(-size // s) if padding == "SAME" else (size - k) // s + 1
        pads.append(max(0, (out - 1) * s + k - size) // 2 if padding == "SAME" else 0)
        outs.append(out)
    values = np.zeros((n, *outs, c), x.dtype)
    indices = np.zeros((n, *outs, c), np.int64)
    for b, *o, ch in itertools.product(range(n), *map(range, outs), range(c)):
        best = None
        ranges = [
            range(oi * s - p, oi * s - p + k)
            for oi, s, p, k in zip(o, strides, pads, ksize, strict=True)
        ]
        for pos in itertools.product(*ranges):
            if not all(0 <= q < size for q, size in zip(pos, spatial, strict=True)):
                continue
            value = x[(b, *pos, ch)]
            if best is None or best[0] < value:
                best = (value, pos)
        assert best is not None
        value, pos = best
        flat = int(np.ravel_multi_index(pos, spatial))
        values[(b, *o, ch)] = value
        indices[(b, *o, ch)] = (
            flat * c + ch if channels_last else ch * int(np.prod(spatial)) + flat
        )
    if not channels_last:
        values, indices = np.moveaxis(values, -1, 1), np.moveaxis(indices, -1, 1)
    return values, indices


def flat_scatter_add(updates: np.ndarray, indices: np.ndarray, shape) -> np.ndarray:
    """float64 ``zeros(shape)``, then each update added at its flat index in
    its image (the first axis), as TensorFlow's ``MaxPoolGradWithArgmax``
    and ``tf.scatter_nd`` unpooling place them."""
    n = shape[0]
    out = np.zeros((n, int(np.prod(shape[1:]))))
    rows = np.repeat(np.arange(n), updates.size // max(n, 1))
    np.add.at(out, (rows, indices.reshape(-1)), updates.reshape(-1).astype(np.float64))
    return out.reshape(shape)
