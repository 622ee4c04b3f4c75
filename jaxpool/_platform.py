"""The platform seam: the one module that knows the platform or the mesh.

Kernels are plain functions of arrays and a spec, plus a static *form*: which
of their variants XLA should get. This module picks the form for each
platform and hands it over through :func:`by_platform`, jaxpool's only use of
``lax.platform_dependent``; it alone asks whether a mesh is in context. A new
kernel is a new module and a new entry here.

The implementation (``implementation=``): ``"xla"``, the forms below, or
``"pallas"``, the Triton kernels of ``_pallas`` (compiled on GPU, interpreted
on CPU for tests). ``None`` picks per platform (:func:`implementation`), at
trace time and never inside ``lax.platform_dependent``: a multi-platform
``jax.export`` lowers every branch for every platform, and a Pallas GPU
kernel cannot be lowered for a CPU.

A backward is two choices: the algorithm (``algorithm=``, the user's: the
scatter or the deterministic gather; :func:`algorithm` resolves ``"auto"``)
and the form that runs it (:func:`form`: the scatter, XLA's covering sum, the
TPU's dense one or Pallas's). The fractional pools
have their own :func:`fractional_algorithm` and forms
(:func:`fractional_forward`, :func:`fractional_backward`).

The CPU forms (why each exists, and what it measured, is in the performance
docs): the passes and indices computed into their own buffers
(``_fusion.materialize``), a strided minor axis read from a phase-split copy,
the values read back at the indices, and the scatter run over the whole array
flattened. Under a mesh the forms that would read one element of a sharded
array or merge the ``(n, c)`` planes are left out, so that sharding over N and
C needs no communication.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jaxlib.version
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from . import _backward, _fractional, _pallas, _planes, _scan, _tpu
from ._windows import (
    INT32_MAX,
    Algorithm,
    FractionalSpec,
    Implementation,
    PoolSpec,
    split,
)

Form = TypeVar("Form")

PLATFORMS = ("cpu", "gpu", "tpu")
# The TPU's forms of the forward and of the deterministic backward (``_tpu``).
TPU = "tpu"
# The backward's other forms (:func:`form`): the scatter-add (``_planes``),
# the deterministic covering sum in XLA (``_backward``) or in Pallas
# (``_pallas``).
SCATTER, GATHER, PALLAS = "scatter", "gather", "pallas"
# The fractional forward's forms: each tap read by element gathers, or the
# windows of the stride-1 pool picked by whole rows, with a gather or (on a
# TPU) one-hot matmuls; the deterministic backward's picks are the same
# (``_fractional``).
TAPS, ROWS, MATMUL = "taps", "rows", "matmul"


def _takes(form: str, nd: int) -> _fractional.Takes:
    """How a fractional form picks each axis's rows."""
    return _fractional.TPU_TAKES[nd] if form == MATMUL else None


def by_platform(
    emit: Callable[[Form], Callable[..., Any]],
    *args: Any,
    cpu: Form,
    default: Form,
    tpu: Form | None = None,
) -> Any:
    """``emit(form)(*args)`` with the form of the platform the program is
    lowered for: ``cpu`` on CPU, ``tpu`` on a TPU (``default`` when not
    given), ``default`` elsewhere. One program when the forms are the same;
    otherwise ``lax.platform_dependent`` (lowering for one platform emits that
    platform's form alone)."""
    forms = {"cpu": cpu, "tpu": default if tpu is None else tpu}
    branches = {name: emit(f) for name, f in forms.items() if f != default}
    if not branches:
        return emit(default)(*args)
    return lax.platform_dependent(*args, **branches, default=emit(default))


def traced_once(kernel: Callable[..., Any], static: int | tuple[int, ...]) -> Any:
    """``kernel`` jitted with its ``static`` arguments, so that tracing it again
    with the same arguments in one program reuses the first jaxpr: every
    platform's form of a kernel is traced (:func:`by_platform`), and that is
    most of a pool's tracing time. JAX traces a ``custom_vjp``'s forward rule
    under the context's abstract mesh (an empty one where none is set) and its
    primal without one; the kernel runs under the context's mesh here, so that
    the jit cache's keys agree."""
    jitted = jax.jit(kernel, static_argnums=static)

    @functools.wraps(kernel)
    def run(*args: Any) -> Any:
        with jax.sharding.use_abstract_mesh(jax.sharding.get_abstract_mesh()):
            return jitted(*args)

    return run


def under_mesh(arr: jax.Array) -> bool:
    """Whether a mesh is in context (``jax.set_mesh``) or typed on ``arr``."""
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty or not jax.typeof(arr).sharding.mesh.empty


def plane_sharding(arr: jax.Array, nd: int, trail: int, new_nd: int) -> Any:
    """Sharding for new arrays that must line up with ``arr``'s plane axes.

    ``arr`` has ``nd`` spatial axes and ``trail`` trailing ones; the new array
    has the same leading and trailing axes around ``new_nd`` spatial ones.
    Under a mesh with Explicit axes every array carries its sharding in its
    type and mixing shardings is an error, so arrays the kernels create (the
    running max, index tables, zeros) take the non-spatial axes' sharding of
    ``arr``. ``None`` elsewhere: the partitioner propagates it.
    """
    sharding = jax.typeof(arr).sharding
    mesh = sharding.mesh
    if mesh.empty or AxisType.Explicit not in mesh.axis_types:
        return None
    spec = (*sharding.spec, *(None,) * (arr.ndim - len(sharding.spec)))
    first, stop = split(arr.ndim, nd, trail)
    new = (*spec[:first], *(None,) * new_nd, *spec[stop:])
    return NamedSharding(mesh, PartitionSpec(*new))


# The kernels for which an H200 run measured Pallas faster than XLA's forms,
# so that implementation=None takes Pallas there on a GPU: none. On the H200
# (2026-12-04, jax 0.11.2) the Pallas forward was faster only on strided
# windows, its gather backward slower wherever windows overlap, and jax
# deprecates Pallas's Triton backend (docs/performance.md, "Pallas on GPU").
PALLAS_ON_GPU: frozenset[str] = frozenset()


def implementation(spec: PoolSpec, kernel: str) -> Implementation:
    """The implementation of ``kernel`` (``"forward"`` or ``"backward"``) that
    runs: the spec's, or for ``None`` Pallas where :data:`PALLAS_ON_GPU` names
    the kernel and JAX's default backend is a GPU, XLA elsewhere."""
    if spec.implementation is not None:
        return spec.implementation
    on_gpu = jax.default_backend() == "gpu"
    return "pallas" if on_gpu and kernel in PALLAS_ON_GPU else "xla"


def forward(x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    """The forward kernel's ``(values, indices)``, in each platform's form."""
    if implementation(spec, "forward") == "pallas":
        return by_platform(
            _pallas_form(_pallas.forward, spec), x, cpu=True, default=False
        )
    sharding = plane_sharding(x, spec.nd, spec.trail, spec.nd)
    phases = _scan.splits_phases(spec.axes, spec.trail)
    cpu = _scan.ScanForm(materialize=not under_mesh(x), phases=phases, read_back=True)
    # Accelerators: the values carried through the scan with the index (no
    # read-back gather, none at all on a TPU), the padding folded into the taps.
    accelerator = _scan.ScanForm(
        materialize=False, phases=False, read_back=False, pad_taps=True
    )

    def emit(kind: _scan.ScanForm | str) -> Callable[[jax.Array], Any]:
        if kind == TPU:  # one variadic window reduction (see _tpu)
            return functools.partial(_tpu.window_argmax, spec=spec, sharding=sharding)
        assert isinstance(kind, _scan.ScanForm)
        return functools.partial(
            _scan.window_argmax, spec=spec, form=kind, sharding=sharding
        )

    return by_platform(emit, x, cpu=cpu, default=accelerator, tpu=TPU)


def algorithm(spec: PoolSpec, own_indices: bool, platform: str) -> Algorithm:
    """The backward that runs on ``platform`` (``"cpu"``, ``"gpu"`` or
    ``"tpu"``): ``"scatter"`` or ``"gather"`` (:func:`form` says in which
    form). The spec's algorithm, or for ``"auto"``:

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
    - where windows overlap, the scatter on CPU; on GPU the scatter where the
      installed jaxlib compiles its float adds to native atomics and XLA's
      determinism flags are off (:func:`gpu_scatter`), else the
      deterministic gather.

    The performance docs give the compiled programs that chose each.
    """
    if spec.algorithm != "auto":
        return spec.algorithm
    if not own_indices:
        return "scatter"
    if implementation(spec, "backward") == "pallas":
        return "gather"
    if platform == "tpu":
        return "gather" if _tpu.dense(spec) else "scatter"
    if all(w.disjoint for w in spec.axes):
        return "gather"
    return "scatter" if platform == "cpu" or gpu_scatter() else "gather"


def form(spec: PoolSpec, chosen: Algorithm, platform: str, mesh: bool) -> str:
    """The kernel that runs the ``chosen`` backward (:func:`algorithm`) on
    ``platform``, ``mesh`` telling whether a mesh is in context:

    - the gather: :data:`PALLAS` where the backward is Pallas's; on a TPU,
      :data:`TPU` (its dense form, ``_tpu.covering_sum``: no gather, no
      scatter) for regular windows of dilation 1 (``_tpu.dense``) when no mesh
      is in context (its phase interleave is not written for arrays that
      carry their sharding, and every branch is traced, on any platform);
      else :data:`GATHER`, XLA's covering sum;
    - the scatter: :data:`SCATTER`.
    """
    xla = implementation(spec, "backward") == "xla"
    tpu = platform == "tpu" and xla and not mesh
    if chosen == "gather":
        if not xla:
            return PALLAS
        return TPU if tpu and _tpu.dense(spec) else GATHER
    return SCATTER


def fractional_algorithm(spec: FractionalSpec, platform: str) -> Algorithm:
    """The fractional backward that runs on ``platform``: the spec's, or for
    ``"auto"`` the scatter on CPU and on a GPU where :func:`gpu_scatter` says
    so; elsewhere (a TPU, which serialises scatters) the deterministic
    gather (:func:`fractional_backward` says in which form). Both honour every
    index inside the plane, so the choice does not ask whose the indices
    are."""
    if spec.algorithm != "auto":
        return spec.algorithm
    scatter = platform == "cpu" or (platform == "gpu" and gpu_scatter())
    return "scatter" if scatter else "gather"


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


def _release(version: str) -> tuple[int, ...]:
    """``(major, minor, patch)`` of a version string such as ``0.11.1.dev2``."""
    parts = version.split(".")[:3]
    return tuple(int(re.sub(r"\D.*", "", part) or 0) for part in parts)


JAXLIB = _release(jaxlib.version.__version__)


def xla_flags() -> dict[str, str]:
    """``XLA_FLAGS`` as ``{name: value}`` (``"true"`` for a bare ``--name``;
    the last occurrence wins), read when a program is traced."""
    flags = {}
    for token in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = token.lstrip("-").partition("=")
        flags[name] = value or "true"
    return flags


def gpu_scatter() -> bool:
    """Whether ``"auto"`` runs the scatter on a GPU: its float adds compile to
    native atomics (jaxlib from :data:`NATIVE_ATOMICS_FROM`, or LLVM's
    ``-nvptx-allow-ftz-atomics`` given in ``XLA_FLAGS``) and none of
    :data:`DETERMINISM_FLAGS` is set."""
    flags = xla_flags()
    if any(flags.get(f, "false").lower() in ("true", "1") for f in DETERMINISM_FLAGS):
        return False
    extra = flags.get("xla_backend_extra_options", "")
    ftz = any(o.lstrip("-") == "nvptx-allow-ftz-atomics" for o in extra.split(","))
    return JAXLIB >= NATIVE_ATOMICS_FROM or ftz


def backward(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    own_indices: bool = False,
) -> jax.Array:
    """The gradient with respect to ``x`` (its shape and dtype), with the
    spec's algorithm (see :func:`algorithm`; ``own_indices``: the indices are
    the forward's, as in its VJP), in each platform's form (:func:`form`)."""
    mesh = under_mesh(indices)

    def kernel_on(platform: str) -> str:
        return form(spec, algorithm(spec, own_indices, platform), platform, mesh)

    def emit(kernel: str) -> Callable[[jax.Array, jax.Array], jax.Array]:
        if kernel == SCATTER:
            layout = dict(x=x, nd=spec.nd, trail=spec.trail)
            return functools.partial(_scatter, accumulate=True, **layout)
        if kernel == PALLAS:
            pallas = _pallas_form(_pallas_gather_sum, spec, x)
            return lambda g, i: by_platform(pallas, g, i, cpu=True, default=False)
        covering = _tpu.covering_sum if kernel == TPU else _backward.covering_sum
        # The algorithm is not the kernel's: the VJP and the "gather" op share
        # one trace.
        kernel_spec = spec._replace(algorithm="auto")
        return lambda g, i: _gather(g, i, covering, x, kernel_spec)

    cpu, gpu, tpu = map(kernel_on, PLATFORMS)
    return by_platform(emit, grad_output, indices, cpu=cpu, default=gpu, tpu=tpu)


def _gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    covering: Callable[..., jax.Array],
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
) -> jax.Array:
    """The ``"gather"`` backward with XLA's ``covering`` sum (``_backward``'s
    or, on a TPU, ``_tpu``'s dense one): the windows that cover each element,
    then the windows with no in-bounds tap, rounded once."""
    sharding = plane_sharding(indices, spec.nd, spec.trail, spec.nd)
    total = covering(grad_output, indices, x, spec, sharding)
    total = _backward.add_aliased(total, grad_output, indices, spec, sharding)
    return total.astype(x.dtype)


_gather = traced_once(_gather_sum, (2, 3, 4))


def fractional_forward(
    x: jax.Array, rows: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    """The fractional forward's ``(values, indices)`` of the windows that
    start at ``rows`` (``_fractional.axis_starts``): on CPU each tap read by
    element gathers (:data:`TAPS`); on GPU and TPU the windows of the
    stride-1 pool of the same kernel (:func:`forward`, in the platform's
    form) picked at the starts by whole rows (:data:`ROWS`; on a TPU by
    matmuls, :data:`MATMUL`)."""

    def emit(kind: str) -> Callable[..., tuple[jax.Array, jax.Array]]:
        if kind == TAPS:
            return functools.partial(_fractional.gather_taps, spec=spec)

        def pick(x: jax.Array, rows: tuple[jax.Array, ...]) -> Any:
            values, indices = forward(x, spec.every_window())
            takes = _takes(kind, spec.nd)
            return _fractional.pick_windows(values, indices, rows, spec, takes)

        return pick

    return by_platform(emit, x, rows, cpu=TAPS, default=ROWS, tpu=MATMUL)


def fractional_backward(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: FractionalSpec,
    rows: tuple[jax.Array, ...] | None = None,
) -> jax.Array:
    """The fractional pool's gradient with respect to ``x`` (its shape and
    dtype), with the spec's algorithm (:func:`fractional_algorithm`): the
    scatter-add, or a deterministic gather. The VJP gives its window starts
    ``rows`` (its indices are its own): the gather is then the gradients
    spread onto the stride-1 pool's windows (``_fractional.spread_windows``)
    and that pool's covering sum, in each platform's form (:func:`backward`,
    the rows picked as the forward picks them); without them,
    ``_fractional.gather_sum``, a sort, which honours any index inside the
    plane."""
    nd, trail = spec.nd, spec.trail

    def emit(form: tuple[str, str]) -> Callable[..., jax.Array]:
        chosen, picks = form
        if chosen == "gather" and rows is not None:
            takes = _takes(picks, spec.nd)
            return functools.partial(_spread_sum, x=x, spec=spec, takes=takes)
        if chosen == "gather":
            return lambda g, i, *_: _fractional.gather_sum(g, i, x, nd, trail)
        return lambda g, i, *_: _scatter(g, i, x=x, nd=nd, trail=trail, accumulate=True)

    cpu, gpu, tpu = (fractional_algorithm(spec, p) for p in PLATFORMS)
    # Only the spread picks rows: the TPU's other forms are everyone's.
    tpu_picks = MATMUL if tpu == "gather" and rows is not None else ROWS
    args = (grad_output, indices, *(rows or ()))
    return by_platform(
        emit, *args, cpu=(cpu, ROWS), default=(gpu, ROWS), tpu=(tpu, tpu_picks)
    )


def _spread_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    *rows: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: FractionalSpec,
    takes: _fractional.Takes,
) -> jax.Array:
    """The VJP's fractional gather: the gradients spread onto the windows of
    the stride-1 pool (rows picked by ``takes``), then that pool's
    deterministic backward."""
    grads, indices = _fractional.spread_windows(grad_output, indices, rows, spec, takes)
    every = spec.every_window()._replace(algorithm="gather")
    return backward(grads, indices, x, every, own_indices=True)


def unpool(
    values: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
) -> jax.Array:
    """``values`` placed at ``indices`` in zeros shaped like ``out``."""
    return _scatter(values, indices, x=out, nd=nd, trail=trail, accumulate=False)


def _scatter(updates: jax.Array, indices: jax.Array, **kernel: Any) -> jax.Array:
    """``_planes.scatter(updates, indices, **kernel)``: flat over the whole
    array on CPU (offsets within int32, no mesh), batched over the non-spatial
    axes elsewhere."""
    x, nd, trail = kernel["x"], kernel["nd"], kernel["trail"]
    static = all(isinstance(size, int) for size in x.shape)  # not jax.export's
    flat = static and 0 < math.prod(x.shape) < INT32_MAX and not under_mesh(indices)
    sharding = plane_sharding(indices, nd, trail, 1)

    def emit(flat: bool) -> Callable[..., jax.Array]:
        return functools.partial(
            _planes.scatter, **kernel, flat=flat, sharding=sharding
        )

    return by_platform(emit, updates, indices, cpu=flat, default=False)


def _pallas_form(kernel: Callable[..., Any], *static: Any) -> Callable[[bool], Any]:
    """A Pallas kernel's form per platform: interpreted (``True``) on CPU,
    compiled for the GPU elsewhere."""

    def emit(interpret: bool) -> Callable[..., Any]:
        return lambda *arrays: kernel(*arrays, *static, interpret=interpret)

    return emit


def _pallas_gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    spec: PoolSpec,
    x: jax.ShapeDtypeStruct,
    interpret: bool,
) -> jax.Array:
    """The ``"gather"`` backward with Pallas's covering sum."""
    total: jax.Array = _pallas.covering_sum(grad_output, indices, x, spec, interpret)
    return _backward.add_aliased(total, grad_output, indices, spec).astype(x.dtype)
