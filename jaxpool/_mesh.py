"""The mesh helpers: whether a program runs under a mesh, and the shardings of
the arrays the kernels create there.

An op partitions like ``lax.reduce_window``: sharding N or C moves nothing,
and every output and gradient comes back sharded like its input. Kernels
never ask for the mesh themselves: the platform seam asks here and hands
them a sharding (or ``None``).
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from ._windows import split


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
