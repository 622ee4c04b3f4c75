"""The mesh helpers: whether a program runs under a mesh, the shardings of the
arrays the kernels create there, and how an op runs on spatially sharded
arrays of Explicit axes.

An op partitions like ``lax.reduce_window``: sharding N or C moves nothing,
sharding a spatial axis moves only the halos at the shard edges, and every
output and gradient comes back sharded like its input. Under a mesh the
policy (``_policy``) picks forms that XLA's partitioner splits that way
(slices, pads and window reductions; no gather or scatter along a spatial
axis). Kernels never ask for the mesh themselves: the platform seam asks here
and hands them a sharding (or ``None``); the one exception is :func:`whole`,
for the forms that do gather along a spatial axis (the documented limits:
adaptive windows of two sizes, the fractional pool).

With Explicit axes every array's type carries its sharding, and JAX's rules
for ops on a sharded spatial axis (padding there, among others) are not
implemented; so where an input's type shards a spatial axis the seam runs
the op's kernel with those axes Auto (``jax.sharding.auto_axes``), the
partitioner's to split, and types the outputs sharded as the input
(:func:`spatial_sharding`), which requires each sharded output axis to
divide among its devices (:func:`check_divisible`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from ._windows import split


def traced_once(kernel: Callable[..., Any], static: int | tuple[int, ...]) -> Any:
    """``kernel`` jitted with its ``static`` arguments, so that tracing it again
    with the same arguments in one program reuses the first jaxpr: every
    platform's form of a kernel is traced (``_platform.by_platform``), and that is
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


def only_auto_axes(arrays: Sequence[jax.Array]) -> bool:
    """Whether the mesh in context and every mesh typed on ``arrays`` have
    Auto axes alone (no mesh has none): there the arrays' types carry no
    sharding, so a kernel's outputs are typed by their shapes alone and its
    form may be traced later under the context's mesh (``_lazy``)."""
    meshes = [jax.sharding.get_abstract_mesh()]
    meshes += [jax.typeof(arr).sharding.mesh for arr in arrays]
    return all(t == AxisType.Auto for mesh in meshes for t in mesh.axis_types)


def whole(arr: jax.Array, axes: Sequence[int]) -> jax.Array:
    """``arr`` with ``axes`` whole on every device, under a mesh of Auto axes
    in context (its other axes as the partitioner likes); ``arr`` itself
    elsewhere. For a gather or a copy of slices along a spatial axis that the
    windows do not tile: the partitioner splits a gather along a sharded axis
    into a masked gather per device summed by an all-reduce, which turns a
    maximum of -0.0 into 0.0, and a copy of many slices into a program of
    collective-permutes per slice (13,577 instructions and 13.6 s to compile
    the forward of an adaptive 96x131 → 13x17 over 8 devices, the rows
    sharded; 115 instructions and 0.17 s gathered whole). Such an axis moves
    whole, more than halos: the documented limit of those forms."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or any(t != AxisType.Auto for t in mesh.axis_types):
        return arr
    free = PartitionSpec.UNCONSTRAINED
    spec = PartitionSpec(*(None if a in axes else free for a in range(arr.ndim)))
    return jax.lax.with_sharding_constraint(arr, spec)


def mesh_size(arr: jax.Array) -> int:
    """The devices of the mesh in context, or of the one typed on ``arr``."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        mesh = jax.typeof(arr).sharding.mesh
    return 1 if mesh.empty else math.prod(mesh.shape.values())


def uneven(spec: Any, devices: int) -> tuple[bool, ...]:
    """Per spatial axis of the pool ``spec``, whether its strided windows'
    outputs may not divide among ``devices`` along a sharded axis: there XLA's
    partitioner splits a window reduction over a dilated base (the
    deterministic backward's, ``_backward.covering_reduction``) into an
    invalid program (XLA aborts the process), so that axis is read per stride
    phase instead."""
    return tuple(w.stride > 1 and w.out % devices != 0 for w in spec.axes)


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


def spatial_sharding(arr: Any, nd: int, trail: int) -> NamedSharding | None:
    """``arr``'s sharding where its type shards one of its ``nd`` spatial axes
    (``trail`` trailing ones after them) along Explicit mesh axes; ``None``
    otherwise (no mesh, Auto axes, or only N and C sharded)."""
    sharding = getattr(jax.typeof(arr), "sharding", None)
    if sharding is None or sharding.mesh.empty:
        return None
    if AxisType.Explicit not in sharding.mesh.axis_types:
        return None
    spec = (*sharding.spec, *(None,) * (arr.ndim - len(sharding.spec)))
    first, stop = split(arr.ndim, nd, trail)
    if all(spec[a] is None for a in range(first, stop)):
        return None
    return NamedSharding(sharding.mesh, PartitionSpec(*spec))


def check_divisible(
    name: str, arr: Any, nd: int, trail: int, sizes: Sequence[int], what: str
) -> None:
    """Raise where ``arr``'s type shards a spatial axis along Explicit mesh
    axes whose devices do not divide that axis of the result, whose spatial
    sizes are ``sizes`` (``what``: the result, as the message names it)."""
    sharding = spatial_sharding(arr, nd, trail)
    if sharding is None:
        return
    mesh = sharding.mesh
    first, _ = split(arr.ndim, nd, trail)
    for a, size in enumerate(sizes):
        names = sharding.spec[first + a]
        if names is None:
            continue
        names = (names,) if isinstance(names, str) else tuple(names)
        devices = math.prod(mesh.shape[n] for n in names)
        if size % devices:
            raise ValueError(
                f"{name}: {what} has {size} positions along spatial axis {a}, "
                f"which do not divide among the {devices} devices of mesh axes "
                f"{names} that shard it (Explicit axes need them to): choose "
                f"sizes whose result divides by {devices}, shard that axis with "
                f"Auto axes (jaxpool runs there with any size), or shard "
                f"another axis"
            )


def auto_axes_for(
    arr: Any, nd: int, trail: int, outputs: int
) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
    """Where ``arr``'s type shards a spatial axis along Explicit mesh axes
    (:func:`spatial_sharding`): a decorator that runs a kernel with the mesh's
    axes Auto (``jax.sharding.auto_axes``), its ``outputs`` results typed
    with ``arr``'s sharding. ``None`` elsewhere: the kernel runs as it is."""
    sharding = spatial_sharding(arr, nd, trail)
    if sharding is None:
        return None
    out = sharding if outputs == 1 else (sharding,) * outputs
    return jax.sharding.auto_axes(out_sharding=out)
