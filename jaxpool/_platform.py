"""The platform seam: dispatch alone.

Kernels are plain functions of arrays and a spec, plus a static *form*: which
of their variants XLA should get. For each kernel this module asks the policy
(``_policy``: pure functions of the spec, the platform and the environment)
which form runs on each platform, and emits them through :func:`by_platform`,
which traces a platform's form only when the program is lowered for it
(``_lazy``), or, where a mesh's axes are Explicit or Manual, through
``lax.platform_dependent``. The mesh helpers
(``_mesh``) say whether a mesh is in context and what the arrays a kernel
creates are sharded like; the seam hands their answer to the kernels, which
never ask. A new kernel is a new module, a rule in the policy and an entry
here.

The implementation (``implementation=``) is decided at trace time and never
in a platform's branch: a multi-platform ``jax.export`` lowers
every branch for every platform, and a Pallas GPU kernel cannot be lowered
for a CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from jax import lax

from . import (
    _backward,
    _fractional,
    _lazy,
    _pallas,
    _planes,
    _policy,
    _reduce,
    _scan,
    _tpu,
)
from ._mesh import (
    auto_axes_for,
    mesh_size,
    only_auto_axes,
    plane_sharding,
    traced_once,
    under_mesh,
    uneven,
)
from ._policy import (
    MATMUL,
    PALLAS,
    PARTITIONED,
    PARTITIONED_REDUCTION,
    PLATFORMS,
    REDUCTION,
    SCATTER,
    TAPS,
    TPU,
)
from ._windows import FractionalSpec, PoolSpec, with_spatial

Form = TypeVar("Form")


def by_platform(
    emit: Callable[[Form], Callable[..., Any]],
    *args: Any,
    cpu: Form,
    default: Form,
    tpu: Form | None = None,
    out: Any,
) -> Any:
    """``emit(form)(*args)`` with the form of the platform the program is
    lowered for: ``cpu`` on CPU, ``tpu`` on a TPU (``default`` when not
    given), ``default`` elsewhere; ``out``: the outputs' shapes and dtypes
    (a pytree of ``jax.ShapeDtypeStruct``). One program when the forms are
    the same; otherwise each form traced only when the program is lowered
    for its platform (``_lazy``, under the call's mesh of Auto axes, if any:
    the forms read it), or, where a mesh in context or in an argument's type
    has Explicit or Manual axes (whose types the forms' outputs carry),
    ``lax.platform_dependent``, which traces them all with the call."""
    forms = {"cpu": cpu, "tpu": default if tpu is None else tpu}
    if all(f == default for f in forms.values()):
        return emit(default)(*args)
    leaves, tree = jax.tree.flatten(args)
    if not only_auto_axes(leaves):
        branches = {name: emit(f) for name, f in forms.items() if f != default}
        return lax.platform_dependent(*args, **branches, default=emit(default))
    shapes, shaped = jax.tree.flatten(out)

    def flat(form: Form) -> _lazy.Form:
        def run(*arrays: jax.Array) -> list[jax.Array]:
            return jax.tree.leaves(emit(form)(*jax.tree.unflatten(tree, arrays)))

        return run

    x64 = bool(jax.config.read("jax_enable_x64"))
    mesh = jax.sharding.get_abstract_mesh()
    lazy = _lazy.Forms(flat(forms["cpu"]), flat(forms["tpu"]), flat(default), x64, mesh)
    return jax.tree.unflatten(shaped, _lazy.platform_dependent(lazy, leaves, shapes))


def _per_platform(choose: Callable[[str], Form]) -> dict[str, Form]:
    """``by_platform``'s keywords: ``choose(platform)`` for the CPU, the TPU
    and (as the default) the GPU."""
    cpu, gpu, tpu = map(choose, PLATFORMS)
    return {"cpu": cpu, "default": gpu, "tpu": tpu}


def _emit(
    emit: Callable[[Form], Callable[..., Any]],
    choose: Callable[[str], Form],
    platform: str | None,
    *args: Any,
    out: Any,
) -> Any:
    """``by_platform`` over the forms ``choose`` gives each platform, or, in a
    branch already emitted for ``platform`` (a kernel that calls another),
    that platform's form alone: each platform's branch would otherwise trace
    every platform's form again."""
    if platform is None:
        return by_platform(emit, *args, **_per_platform(choose), out=out)
    return emit(choose(platform))(*args)


def forward(
    x: jax.Array, spec: PoolSpec, platform: str | None = None
) -> tuple[jax.Array, jax.Array]:
    """The forward kernel's ``(values, indices)``, in each platform's form
    (``platform``'s alone, where given: see :func:`_emit`)."""
    if auto := auto_axes_for(x, spec.nd, spec.trail, 2):  # see _mesh
        return auto(lambda x: forward(x, spec, platform))(x)
    env = _policy.environment(under_mesh(x))
    pooled = _pooled(x, spec)
    if _policy.implementation(spec, "forward", env) == "pallas":
        return by_platform(
            _pallas.form(_pallas.forward, spec),
            x,
            cpu=True,
            default=False,
            out=pooled,
        )
    sharding = plane_sharding(x, spec.nd, spec.trail, spec.nd)

    def emit(form: _scan.ScanForm | _reduce.ReduceForm) -> Callable[..., Any]:
        if isinstance(form, _reduce.ReduceForm):
            return functools.partial(
                _reduce.window_argmax,
                spec=spec,
                compact=form.compact,
                sharding=sharding,
                gathers=form.gathers,
            )
        assert isinstance(form, _scan.ScanForm)
        return functools.partial(
            _scan.window_argmax, spec=spec, form=form, sharding=sharding
        )

    choose = lambda p: _policy.forward_form(spec, p, env)  # noqa: E731
    return _emit(emit, choose, platform, x, out=pooled)


def _pooled(
    x: jax.Array, spec: PoolSpec | FractionalSpec
) -> tuple[jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    """The shapes and dtypes of a forward's ``(values, indices)``."""
    shape = with_spatial(x.shape, spec.nd, spec.trail, spec.out_size)
    return jax.ShapeDtypeStruct(shape, x.dtype), jax.ShapeDtypeStruct(shape, jnp.int32)


def backward(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    own_indices: bool = False,
    values: jax.Array | None = None,
    platform: str | None = None,
) -> jax.Array:
    """The gradient with respect to ``x`` (its shape and dtype), with the
    spec's algorithm (``_policy.algorithm``; ``own_indices``: the indices are
    the forward's, as in its VJP, which gives its ``values`` too), in each
    platform's form (``_policy.backward_form``; ``platform``'s alone, where
    given: see :func:`_emit`)."""
    if auto := auto_axes_for(indices, spec.nd, spec.trail, 1):  # see _mesh
        if values is None:
            run = auto(
                lambda g, i: backward(g, i, x, spec, own_indices, None, platform)
            )
            return run(grad_output, indices)
        run = auto(lambda g, i, v: backward(g, i, x, spec, own_indices, v, platform))
        return run(grad_output, indices, values)
    env = _policy.environment(under_mesh(indices))
    sharding = plane_sharding(indices, spec.nd, spec.trail, spec.nd)
    if sharding is not None:  # Explicit axes: both typed alike, traced once
        grad_output = jax.sharding.reshard(grad_output, jax.typeof(indices).sharding)
    keyed = values is not None

    def choose(platform: str) -> str:
        chosen = _policy.algorithm(spec, own_indices, platform, env)
        return _policy.backward_form(spec, chosen, own_indices, platform, env, keyed)

    def emit(form: str) -> Callable[..., jax.Array]:
        if form == SCATTER:
            scattered = functools.partial(
                scatter, x=x, nd=spec.nd, trail=spec.trail, accumulate=True
            )
            return lambda g, i, *_: scattered(g, i)
        if form == PALLAS:
            pallas = _pallas.form(_pallas.gather_sum, spec, x)
            return lambda g, i, *_: by_platform(
                pallas, g, i, cpu=True, default=False, out=x
            )
        # The algorithm is not the kernel's: the VJP and the "gather" op share
        # one trace.
        kernel_spec = spec._replace(algorithm="auto")
        if form in (REDUCTION, PARTITIONED_REDUCTION):
            reduction = _backward.covering_reduction
            if form == PARTITIONED_REDUCTION:
                phased = uneven(spec, mesh_size(indices))
                reduction = functools.partial(reduction, phased=phased)

            def reduce(g: jax.Array, i: jax.Array, v: jax.Array) -> jax.Array:
                return _gather_sum(g, i, reduction, x, kernel_spec, sharding, v)

            return reduce
        covering = {
            TPU: _tpu.covering_sum,
            PARTITIONED: _PARTITIONED_SUM,
        }.get(form, _backward.covering_sum)
        return lambda g, i, *_: _gather_sum(g, i, covering, x, kernel_spec, sharding)

    operands = (
        (grad_output, indices) if values is None else (grad_output, indices, values)
    )
    return _emit(emit, choose, platform, *operands, out=x)


_gather_sum = traced_once(_backward.gather_sum, (2, 3, 4, 5))
_PARTITIONED_SUM = functools.partial(_backward.covering_sum, partitioned=True)


def fractional_forward(
    x: jax.Array, rows: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    """The fractional forward's ``(values, indices)`` of the windows that
    start at ``rows`` (``_fractional.axis_starts``), in each platform's form
    (``_policy.fractional_forward_form``): a running max one axis at a time
    (``_fractional.gather_taps``), or the stride-1 pool of the same kernel
    (:func:`forward`, in the platform's form) with the windows picked at the
    starts by whole rows."""
    if auto := auto_axes_for(x, spec.nd, spec.trail, 2):  # see _mesh
        return auto(lambda x, rows: fractional_forward(x, rows, spec))(x, rows)

    def emit(form: tuple[str, str]) -> Callable[..., tuple[jax.Array, jax.Array]]:
        picks, platform = form
        if picks == TAPS:
            return functools.partial(_fractional.gather_taps, spec=spec)

        def pick(x: jax.Array, rows: tuple[jax.Array, ...]) -> Any:
            values, indices = forward(x, spec.every_window(), platform)
            matmul = picks == MATMUL
            return _fractional.pick_windows(values, indices, rows, spec, matmul)

        return pick

    # Each form names its platform, whose stride-1 pool it calls.
    forms = _per_platform(lambda p: (_policy.fractional_forward_form(p), p))
    return by_platform(emit, x, rows, **forms, out=_pooled(x, spec))


def fractional_backward(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: FractionalSpec,
    rows: tuple[jax.Array, ...] | None = None,
    values: jax.Array | None = None,
) -> jax.Array:
    """The fractional pool's gradient with respect to ``x`` (its shape and
    dtype), with the spec's algorithm (``_policy.fractional_algorithm``): the
    scatter-add, or a deterministic gather. The VJP gives its window starts
    ``rows`` (its indices are its own) and, where a platform's backward reads
    them, its ``values``: the gather is then the gradients (with the
    indices and values) spread onto the stride-1 pool's windows
    (``_fractional.spread_windows``) and that pool's backward of its own
    indices, in each platform's form (:func:`backward`); without them,
    ``_fractional.gather_sum``, a sort, which honours any index inside the
    plane."""
    nd, trail = spec.nd, spec.trail
    keyed = values is not None
    if auto := auto_axes_for(indices, nd, trail, 1):  # see _mesh
        more = (values,) if keyed else ()

        def run(g: jax.Array, i: jax.Array, *rest: jax.Array) -> jax.Array:
            v, r = (rest[0], rest[1:]) if keyed else (None, rest)
            return fractional_backward(g, i, x, spec, r or None, v)

        return auto(run)(grad_output, indices, *more, *(rows or ()))
    env = _policy.environment(under_mesh(indices))

    def emit(form: tuple[str, str, str]) -> Callable[..., jax.Array]:
        chosen, picks, platform = form
        if chosen == "gather" and rows is not None:
            matmul = picks == MATMUL

            def spread_sum(g: jax.Array, i: jax.Array, *rest: jax.Array) -> Any:
                v, rows = (rest[0], rest[1:]) if keyed else (None, rest)
                v = None if matmul else v  # a TPU's dense backward reads none
                g, i, v = _fractional.spread_windows(g, i, rows, spec, matmul, v)
                # Spread once, into buffers: fused into a GPU's window
                # reduction, every window it reads would spread them again.
                g, i, v = lax.optimization_barrier((g, i, v))
                every = spec.every_window()._replace(algorithm="gather")
                return backward(g, i, x, every, True, v, platform)

            return spread_sum
        if chosen == "gather":
            return lambda g, i, *_: _fractional.gather_sum(g, i, x, nd, trail)
        return lambda g, i, *_: scatter(g, i, x=x, nd=nd, trail=trail, accumulate=True)

    spread = rows is not None
    forms = _per_platform(  # each naming its platform, whose backward it calls
        lambda p: (*_policy.fractional_backward_form(spec, p, spread, env), p)
    )
    more = (values,) if keyed else ()
    operands = (grad_output, indices, *more, *(rows or ()))
    return by_platform(emit, *operands, **forms, out=x)


def unpool(
    values: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
    windows: PoolSpec | None,
) -> jax.Array:
    """``values`` placed at ``indices`` in zeros shaped like ``out``: a
    scatter, which honours any index inside the plane; given the pool's
    ``windows`` (``_core.unpool`` gives them under a mesh alone), each value
    within its own window (``_backward.place``: no scatter, for XLA's
    partitioner)."""
    if windows is None:
        return scatter(values, indices, x=out, nd=nd, trail=trail, accumulate=False)
    if auto := auto_axes_for(indices, nd, trail, 1):  # see _mesh
        return auto(lambda v, i: unpool(v, i, out, nd, trail, windows))(values, indices)
    sharding = plane_sharding(indices, nd, trail, nd)
    return _backward.place(values, indices, windows, sharding)


def unpool_cotangent(
    ct: jax.Array, indices: jax.Array, nd: int, trail: int, windows: PoolSpec | None
) -> jax.Array:
    """The unpool's gradient: ``ct`` read at the indices (0 outside the
    plane); given the pool's ``windows``, within each index's window
    (``_backward.read``, the transpose of :func:`unpool`'s placing)."""
    if auto := auto_axes_for(indices, nd, trail, 1):  # see _mesh
        read = lambda c, i: unpool_cotangent(c, i, nd, trail, windows)  # noqa: E731
        return auto(read)(ct, indices)
    if windows is None:
        return _planes.gather_at(ct, indices, nd, trail, 0.0)
    return _backward.read(ct, indices, windows)


def scatter(updates: jax.Array, indices: jax.Array, **kernel: Any) -> jax.Array:
    """``_planes.scatter(updates, indices, **kernel)`` in each platform's form
    (``_policy.flat_scatter``): flat over the whole array, or batched over
    the non-spatial axes."""
    x, nd, trail = kernel["x"], kernel["nd"], kernel["trail"]
    if auto := auto_axes_for(indices, nd, trail, 1):  # see _mesh
        return auto(lambda u, i: scatter(u, i, **kernel))(updates, indices)
    env = _policy.environment(under_mesh(indices))
    sharding = plane_sharding(indices, nd, trail, 1)

    def emit(flat: bool) -> Callable[..., jax.Array]:
        return functools.partial(
            _planes.scatter, **kernel, flat=flat, sharding=sharding
        )

    forms = _per_platform(lambda p: _policy.flat_scatter(x.shape, p, env))
    return by_platform(emit, updates, indices, **forms, out=x)
