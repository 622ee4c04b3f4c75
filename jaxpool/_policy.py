"""The policy: which algorithm and which kernel form run, as pure functions.

Each rule is a function of the spec, the platform a program is lowered for
(``"cpu"``, ``"gpu"`` or ``"tpu"``) and the :class:`Environment`: the
installed jaxlib, ``XLA_FLAGS``, JAX's default backend and whether a mesh is
in context. Nothing here traces or reads the process but
:func:`environment`, so the rules are tested from a table
(``tests/test_policy.py``); the platform seam (``_platform``) asks them and
emits the forms. Why each rule chose what it chose, with the measurements, is
in the performance docs and ``benchmarks/results/NOTES.md``.

The backward is two choices: the algorithm (``algorithm=``, the user's: the
scatter or the deterministic gather; :func:`algorithm` resolves ``"auto"``)
and the form that runs it (:func:`backward_form`). The fractional pools have
their own (:func:`fractional_algorithm`, :func:`fractional_forms`).
"""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

import jax
import jaxlib.version

from . import _reduce, _scan, _tpu
from ._windows import INT32_MAX, Algorithm, FractionalSpec, Implementation, PoolSpec

PLATFORMS = ("cpu", "gpu", "tpu")
# The TPU's forms of the forward and of the deterministic backward (``_tpu``).
TPU = "tpu"
# The backward's other forms: the scatter-add (``_planes``), the
# deterministic covering sum in XLA (``_backward``) or in Pallas
# (``_pallas``).
SCATTER, GATHER, PALLAS = "scatter", "gather", "pallas"
# XLA's covering sum in the form XLA's partitioner splits along a sharded
# spatial axis with halo exchanges (``_backward.covering_sum``'s
# ``partitioned``), for adaptive windows of two sizes under a mesh.
PARTITIONED = "partitioned"
# The deterministic backward of the forward's own values and indices as one
# variadic window reduction (``_backward.covering_reduction``): a program
# that does not grow with the window's size.
REDUCTION = "reduction"
# The forward as one variadic window reduction (``_reduce``): with flat codes
# (GPU, and every platform under a mesh), with the TPU's compact ones, and
# the CPU's form of adaptive windows of two sizes under a mesh (their copies
# gathered).
REDUCE = _reduce.ReduceForm(compact=False)
COMPACT = _reduce.ReduceForm(compact=True)
GATHERED = _reduce.ReduceForm(compact=False, gathers=True)
# The covering reduction per stride phase, which XLA's partitioner splits
# along a sharded spatial axis with halo exchanges: the backward of the
# forward's own values and indices of regular windows under a mesh.
PARTITIONED_REDUCTION = "partitioned reduction"
# The fractional forward's forms: a running max one axis at a time, each tap
# a gather of whole rows, or the windows of the stride-1 pool picked by whole
# rows, with a gather or (on a
# TPU) one-hot matmuls; the deterministic backward's picks are the same
# (``_fractional``).
TAPS, ROWS, MATMUL = "taps", "rows", "matmul"

# The kernels for which an H200 run measured Pallas faster than XLA's forms,
# so that implementation=None takes Pallas there on a GPU: none. On the H200
# (2026-12-04, jax 0.11.2) the Pallas forward was faster only on strided
# windows, its gather backward slower wherever windows overlap, and jax
# deprecates Pallas's Triton backend (docs/performance.md, "Pallas on GPU").
PALLAS_ON_GPU: frozenset[str] = frozenset()

# The jaxlib from which XLA compiles a GPU float scatter-add to a native
# atomic add instead of a compare-and-swap loop (LLVM's NVPTX back end allows
# flush-to-zero float atomics by default from there; jax-ml/jax#38806).
NATIVE_ATOMICS_FROM = (0, 11, 1)
# XLA's switches that make a GPU program deterministic: under either, XLA
# rewrites every scatter into a sort-based one (or refuses it).
DETERMINISM_FLAGS = (
    "xla_gpu_deterministic_ops",
    "xla_gpu_exclude_nondeterministic_ops",
)


def release(version: str) -> tuple[int, ...]:
    """``(major, minor, patch)`` of a version string such as ``0.11.1.dev2``."""
    parts = version.split(".")[:3]
    return tuple(int(re.sub(r"\D.*", "", part) or 0) for part in parts)


JAXLIB = release(jaxlib.version.__version__)


class Environment(NamedTuple):
    """What the rules read besides the spec and the platform."""

    jaxlib: tuple[int, ...] = JAXLIB
    xla_flags: tuple[tuple[str, str], ...] = ()  # (name, value), in order
    backend: str = "cpu"  # JAX's default backend: where None picks Pallas
    mesh: bool = False  # a mesh in context, or typed on the arrays


def parse_flags(text: str) -> tuple[tuple[str, str], ...]:
    """``XLA_FLAGS`` as ``(name, value)`` pairs (``"true"`` for a bare
    ``--name``)."""
    pairs = []
    for token in text.split():
        name, _, value = token.lstrip("-").partition("=")
        pairs.append((name, value or "true"))
    return tuple(pairs)


def environment(mesh: bool) -> Environment:
    """The environment of a program traced now: :data:`JAXLIB`, ``XLA_FLAGS``
    and the default backend as they are when it is traced."""
    flags = parse_flags(os.environ.get("XLA_FLAGS", ""))
    return Environment(JAXLIB, flags, jax.default_backend(), mesh)


def implementation(spec: PoolSpec, kernel: str, env: Environment) -> Implementation:
    """The implementation of ``kernel`` (``"forward"`` or ``"backward"``) that
    runs: the spec's, or for ``None`` Pallas where :data:`PALLAS_ON_GPU` names
    the kernel and the default backend is a GPU, XLA elsewhere."""
    if spec.implementation is not None:
        return spec.implementation
    return "pallas" if env.backend == "gpu" and kernel in PALLAS_ON_GPU else "xla"


def forward_form(
    spec: PoolSpec, platform: str, env: Environment
) -> _scan.ScanForm | _reduce.ReduceForm:
    """The XLA forward's form on ``platform``: on the CPU without a mesh the
    scan (``_scan.ScanForm``: the values read back at the indices, a strided
    minor axis read from a phase-split copy where it pays
    (``_scan.splits_phases``), and each pass and the indices in buffers of
    their own), which XLA:CPU runs several times faster than a window
    reduction; elsewhere one variadic window reduction (``_reduce``): on a
    TPU with compact codes (:data:`COMPACT`), on a GPU and under a mesh with
    flat ones (:data:`REDUCE`), which XLA fuses with their iotas into one
    kernel and its partitioner splits along a sharded spatial axis with halo
    exchanges. Adaptive windows of two sizes are reduced one axis at a time
    there (``_reduce.staged_argmax``), each a plain reduction over a copy of
    the axis in which every window is its taps in turn; the CPU's copy under
    a mesh a gather (:data:`GATHERED`), which compiles in a sixth of the time
    of the copy's slices (0.17 s against 1.01 s for 96x131 → 13x17 over 8
    devices; ``_mesh.whole``). A CPU without a mesh scans them in passes:
    1.7x faster than the gathered reduction (the performance record,
    "2026-12-07: compile time")."""
    if platform == "tpu":
        return COMPACT
    if platform != "cpu":
        return REDUCE
    if env.mesh:
        return GATHERED if any(w.starts for w in spec.axes) else REDUCE
    phases = _scan.splits_phases(spec.axes, spec.trail)
    return _scan.ScanForm(materialize=True, phases=phases, read_back=True)


def gpu_scatter(env: Environment) -> bool:
    """Whether ``"auto"`` runs the scatter on a GPU: its float adds compile to
    native atomics (jaxlib from :data:`NATIVE_ATOMICS_FROM`, or LLVM's
    ``-nvptx-allow-ftz-atomics`` given in ``XLA_FLAGS``) and none of
    :data:`DETERMINISM_FLAGS` is set (bare, ``=true`` or ``=1``; the last
    occurrence of a flag wins)."""
    flags = dict(env.xla_flags)
    if any(flags.get(f, "false").lower() in ("true", "1") for f in DETERMINISM_FLAGS):
        return False
    extra = flags.get("xla_backend_extra_options", "")
    ftz = any(o.lstrip("-") == "nvptx-allow-ftz-atomics" for o in extra.split(","))
    return env.jaxlib >= NATIVE_ATOMICS_FROM or ftz


def algorithm(
    spec: PoolSpec, own_indices: bool, platform: str, env: Environment
) -> Algorithm:
    """The backward that runs on ``platform``: ``"scatter"`` or ``"gather"``
    (:func:`backward_form` says in which form). The spec's algorithm, or for
    ``"auto"``:

    - ``"scatter"`` where the indices may come from anywhere (not
      ``own_indices``): only the scatter honours an index outside its window;
    - where the backward is Pallas's, its gather;
    - on a TPU, the gather where its dense form applies (regular windows,
      dilation 1; fewer bytes than ``jax.grad`` through ``lax.reduce_window``,
      whose select-and-scatter cannot carry PyTorch's selection for float32),
      else the scatter (which a TPU runs one update at a time; adaptive
      windows: 3.7x fewer bytes than the gather);
    - where windows are disjoint, the gather (an elementwise select: each
      input element receives at most one gradient, so the scatter's bits
      without a scatter);
    - where windows overlap, the scatter on CPU; on GPU the scatter where
      :func:`gpu_scatter`, else the deterministic gather.
    """
    if spec.algorithm != "auto":
        return spec.algorithm
    if not own_indices:
        return "scatter"
    if implementation(spec, "backward", env) == "pallas":
        return "gather"
    if platform == "tpu":
        return "gather" if _tpu.dense(spec) else "scatter"
    if all(w.disjoint for w in spec.axes):
        return "gather"
    return "scatter" if platform == "cpu" or gpu_scatter(env) else "gather"


# The most taps a window of the TPU's dense backward has: one term per tap, a
# program that grows with the window's volume (its budgets' windows have 27 at
# most). Larger windows take the elementwise select where they are disjoint,
# the covering reduction where they overlap.
DENSE_TAPS = 27
# The most windows that cover one input element (per axis ``ceil(extent /
# stride)``, multiplied) for which a GPU's gather of strided overlapping
# windows is the covering sum, a gather per covering window: a k3 s2 window
# in 3-D (8). Past that, and at stride 1 (where each covering window is the
# whole output shifted), the covering reduction, whose program does not grow
# with them:
# the compile-only H200's step of 8x32x64³ k3 s2 p1 is 5 kernels and 34 MB
# of temporaries as the covering sum, 6 and 604 MB as the reduction; of
# 2x32x96³ k3 s1 p1 (27 covering windows) 7.6 s to compile as the sum, 0.95
# s as the reduction, in 6 kernels instead of 18 before either.
GPU_COVERING = 8


def covering_windows(spec: PoolSpec) -> int:
    """How many regular windows can cover one input element."""
    return math.prod(-(-w.extent // w.stride) for w in spec.axes)


def backward_form(
    spec: PoolSpec,
    chosen: Algorithm,
    own_indices: bool,
    platform: str,
    env: Environment,
    keyed: bool = False,
) -> str:
    """The kernel that runs the ``chosen`` backward (:func:`algorithm`) on
    ``platform`` (``own_indices``: the forward's indices, as in its VJP;
    ``keyed``: the forward's values too):

    - under a mesh, for the gather, and in the VJP for the scatter too (the
      forward's indices lie in their windows, so it is the scatter's sum, in
      a fixed order), a form that XLA's partitioner splits along a sharded
      spatial axis with halo exchanges: :data:`PARTITIONED_REDUCTION` (a
      window reduction per stride phase) given the forward's values of
      regular windows, else :data:`PARTITIONED`; Pallas's gather stays
      Pallas's (``shard_map`` it);
    - the gather: :data:`PALLAS` where the backward is Pallas's; on a TPU,
      :data:`TPU` (its dense form, ``_tpu.covering_sum``: no gather, no
      scatter) for the windows ``_tpu.dense`` accepts of at most
      :data:`DENSE_TAPS` taps, larger ones the elementwise select
      (:data:`GATHER`) where disjoint, else :data:`REDUCTION`; on a GPU, of
      overlapping regular windows given the forward's values, at stride 1 or
      covered by more than :data:`GPU_COVERING` windows, :data:`REDUCTION` (one window
      reduction, where the covering sum is one gather per covering window);
      else
      :data:`GATHER`, XLA's covering sum;
    - the scatter: :data:`SCATTER`.
    """
    xla = implementation(spec, "backward", env) == "xla"
    if chosen == "gather" and not xla:
        return PALLAS
    regular = keyed and own_indices and not any(w.starts for w in spec.axes)
    if env.mesh and (chosen == "gather" or own_indices):
        return PARTITIONED_REDUCTION if regular else PARTITIONED
    if chosen == "gather":
        overlapping = not all(w.disjoint for w in spec.axes)
        if platform == "tpu" and _tpu.dense(spec):
            if math.prod(w.taps for w in spec.axes) <= DENSE_TAPS:
                return TPU
            if not overlapping:
                return GATHER
            return REDUCTION if regular else TPU
        if platform == "gpu" and regular and overlapping:
            many = covering_windows(spec) > GPU_COVERING
            shifted = all(w.stride == 1 for w in spec.axes)
            return REDUCTION if many or shifted else GATHER
        return GATHER
    return SCATTER


def reads_values(spec: PoolSpec, env: Environment) -> bool:
    """Whether the VJP's backward reads the forward's values on some platform
    (:data:`REDUCTION` or :data:`PARTITIONED_REDUCTION`), so that the VJP
    keeps them beside the indices; elsewhere its residuals are the indices
    alone."""
    reductions = (REDUCTION, PARTITIONED_REDUCTION)
    return any(
        backward_form(spec, algorithm(spec, True, p, env), True, p, env, True)
        in reductions
        for p in PLATFORMS
    )


def fractional_reads_values(spec: FractionalSpec, env: Environment) -> bool:
    """Whether the fractional VJP's backward reads the forward's values on
    some platform: where it is the gather, spread onto the stride-1 pool,
    whose own backward is then a covering reduction (:func:`reads_values`)."""
    every = spec.every_window()._replace(algorithm="gather")
    return any(
        fractional_algorithm(spec, p, env) == "gather"
        and backward_form(every, "gather", True, p, env, True)
        in (REDUCTION, PARTITIONED_REDUCTION)
        for p in PLATFORMS
    )


def flat_scatter(shape: tuple[int, ...], platform: str, env: Environment) -> bool:
    """Whether a scatter into an array of ``shape`` runs as one scatter into
    the array flattened whole (the CPU's form: offsets within int32, static
    sizes, no mesh, whose partitioner could not keep the planes apart), or
    batched over the non-spatial axes."""
    static = all(isinstance(size, int) for size in shape)  # not jax.export's
    fits = static and 0 < math.prod(shape) < INT32_MAX
    return platform == "cpu" and fits and not env.mesh


def fractional_algorithm(
    spec: FractionalSpec, platform: str, env: Environment
) -> Algorithm:
    """The fractional backward that runs on ``platform``: the spec's, or for
    ``"auto"`` the scatter on CPU and on a GPU where :func:`gpu_scatter` says
    so; elsewhere (a TPU, which serialises scatters) the deterministic
    gather. Both honour every index inside the plane, so the choice does not
    ask whose the indices are."""
    if spec.algorithm != "auto":
        return spec.algorithm
    scatter = platform == "cpu" or (platform == "gpu" and gpu_scatter(env))
    return "scatter" if scatter else "gather"


def fractional_forward_form(platform: str) -> str:
    """The fractional forward's form: :data:`TAPS` on CPU (a running max one
    axis at a time, each tap a pick of whole rows; ``_fractional.gather_taps``);
    the windows of the stride-1 pool picked by whole rows
    on a GPU (:data:`ROWS`) and by one-hot matmuls on a TPU
    (:data:`MATMUL`)."""
    return {"cpu": TAPS, "tpu": MATMUL}.get(platform, ROWS)


def fractional_backward_form(
    spec: FractionalSpec, platform: str, spread: bool, env: Environment
) -> tuple[Algorithm, str]:
    """The fractional backward's ``(algorithm, picks)`` on ``platform``: the
    algorithm of :func:`fractional_algorithm` and, where the gather spreads
    the gradients onto the stride-1 pool's windows (``spread``: the VJP,
    which has its window starts), how it picks their rows: as the forward
    does (:func:`fractional_forward_form`), but on a CPU, whose forward picks
    no rows, by gathers."""
    chosen = fractional_algorithm(spec, platform, env)
    matmul = chosen == "gather" and spread and platform == "tpu"
    return chosen, MATMUL if matmul else ROWS
