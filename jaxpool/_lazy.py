"""Each platform's form traced when a program is lowered for that platform.

``lax.platform_dependent`` traces every platform's branch, and lowering keeps
one: the forms a program never runs were most of jaxpool's tracing time
(the compile-only H200's train step of a 3-D k3 s2 p1 pool traced in 0.27 s,
0.05 s with its own form alone; ``benchmarks/results/NOTES.md``).
:func:`platform_dependent` binds one primitive instead, whose abstract value
is given (the kernels' outputs are shaped by their spec) and whose lowering
traces the form of the platform being lowered for (``mlir.lower_fun``), or,
for a ``jax.export`` to several platforms, ``lax.platform_dependent`` of
theirs.

The transformations wrap each form, lazily too:

- ``vmap``: each form vmapped;
- ``jvp``: the primal outputs are the primitive's, the tangents a primitive
  whose forms are each form's ``jax.jvp`` (its tangent outputs), linear in
  the tangents;
- transposing that one (reverse mode of a backward kernel, in a second
  derivative): each form's ``jax.linear_transpose``.

The forms are traced with the abstract mesh of the call in context, which
``_mesh`` reads (``_mesh.whole``): no mesh, or one of Auto axes, whose arrays'
types carry no sharding, so that the outputs' shapes given are their types.
Where a mesh's axes are Explicit or Manual the seam keeps
``lax.platform_dependent``. Under the compile-only mesh of
``benchmarks/compile_time.py`` a 2-D fractional train step traced in 0.27 s
with every form, 0.01 s with its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core
import numpy as np
from jax import core, lax
from jax.interpreters import ad, batching, mlir

Form = Callable[..., Sequence[jax.Array]]  # flat arrays to a flat list of arrays


class Forms:
    """The forms of one kernel call, each of flat arrays to a flat list of
    arrays: the CPU's, the TPU's and every other platform's, with the x64
    mode and the abstract mesh the call was traced under. Compared by
    identity, as the primitive's parameter."""

    def __init__(
        self, cpu: Form, tpu: Form, default: Form, x64: bool, mesh: Any
    ) -> None:
        self.cpu, self.tpu, self.default = cpu, tpu, default
        self.x64, self.mesh = x64, mesh

    def map(self, wrap: Callable[[Form], Form]) -> Forms:
        wrapped = (wrap(self.cpu), wrap(self.tpu), wrap(self.default))
        return Forms(*wrapped, self.x64, self.mesh)

    def lowered_for(self, platforms: Sequence[str]) -> Form:
        """The form that ``platforms`` (a lowering's) run."""
        kinds = {self._kind(p) for p in platforms}
        if len(kinds) == 1:
            return getattr(self, kinds.pop())
        named = {k: getattr(self, k) for k in kinds - {"default"}}
        default = self.default if "default" in kinds else None
        return lambda *args: lax.platform_dependent(*args, **named, default=default)

    @staticmethod
    def _kind(platform: str) -> str:
        return platform if platform in ("cpu", "tpu") else "default"

    def __repr__(self) -> str:
        return "Forms(cpu, tpu, default)"


def platform_dependent(
    forms: Forms, args: Sequence[jax.Array], out: Sequence[jax.ShapeDtypeStruct]
) -> list[jax.Array]:
    """The outputs of the form of the platform the program is lowered for,
    shaped as ``out``."""
    avals = tuple(core.ShapedArray(o.shape, o.dtype) for o in out)
    return _p.bind(*args, forms=forms, out=avals, linear=(False,) * len(args))


_p = jax.extend.core.Primitive("jaxpool_platform_dependent")
_p.multiple_results = True


@_p.def_impl
def _impl(*args: Any, forms: Forms, out: Any, linear: Any) -> Any:
    """Outside ``jit`` (a linearized function called later, say): the
    program of the arrays' platform, in the x64 mode the forms were bound
    under."""
    del linear
    every = forms.lowered_for(("cpu", "tpu", "cuda"))
    with jax.enable_x64(forms.x64):
        return jax.jit(_checked(every, out, forms))(*args)


@_p.def_abstract_eval
def _abstract(*avals: Any, forms: Forms, out: Any, linear: Any) -> Any:
    del avals, forms, linear
    return out


def _checked(form: Form, out: Sequence[Any], forms: Forms) -> Form:
    """``form``, traced with the abstract mesh and the x64 mode its call was
    bound under, its outputs checked against ``out``."""

    def run(*args: jax.Array) -> list[jax.Array]:
        mesh, x64 = forms.mesh, forms.x64
        with jax.sharding.use_abstract_mesh(mesh), jax.enable_x64(x64):
            results = list(form(*args))
        found = [(r.shape, r.dtype) for r in results]
        if found != [(o.shape, o.dtype) for o in out]:
            raise RuntimeError(f"jaxpool: a form returned {found}, not {out}")
        return results

    return run


def _lower(ctx: Any, *args: Any, forms: Forms, out: Any, linear: Any) -> Any:
    del linear
    platforms = ctx.platforms or ctx.module_context.platforms
    form = _checked(forms.lowered_for(platforms), out, forms)
    with jax.enable_x64(forms.x64):  # the form's own lowering rules too
        return mlir.lower_fun(form, multiple_results=True)(ctx, *args)


# Cached per module by the equation (the forms compare by identity): a kernel
# call that a program holds twice (one jaxpr from the jit cache, in two
# places) is traced and lowered once.
mlir.register_lowering(_p, _lower)


def _batch(args: Any, dims: Any, *, forms: Forms, out: Any, linear: Any) -> Any:
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    in_axes = tuple(dims)
    batched = forms.map(lambda f: jax.vmap(f, in_axes=in_axes, out_axes=0))
    avals = tuple(core.ShapedArray((size, *o.shape), o.dtype) for o in out)
    results = _p.bind(*args, forms=batched, out=avals, linear=linear)
    return results, [0] * len(results)


batching.primitive_batchers[_p] = _batch


def _inexact(aval: Any) -> bool:
    return bool(np.issubdtype(aval.dtype, np.inexact))


def _jvp(primals: Any, tangents: Any, *, forms: Forms, out: Any, linear: Any) -> Any:
    primal_out = _p.bind(*primals, forms=forms, out=out, linear=linear)
    moving = [
        i
        for i, (p, t) in enumerate(zip(primals, tangents, strict=True))
        if _inexact(jax.typeof(p)) and type(t) is not ad.Zero
    ]
    floats = [j for j, o in enumerate(out) if _inexact(o)]
    zeros = [ad.Zero(o.to_tangent_aval()) for o in out]
    if not moving or not floats:
        return primal_out, zeros
    n = len(primals)

    def tangent_form(form: Form) -> Form:
        def run(*args: jax.Array) -> list[jax.Array]:
            def moved(*xs: jax.Array) -> list[jax.Array]:
                full = list(args[:n])
                for i, x in zip(moving, xs, strict=True):
                    full[i] = x
                return list(form(*full))

            at = tuple(args[i] for i in moving)
            _, out_tangents = jax.jvp(moved, at, tuple(args[n:]))
            return [out_tangents[j] for j in floats]

        return run

    lin = tuple(i >= n for i in range(n + len(moving)))
    moved = _p.bind(
        *primals,
        *(tangents[i] for i in moving),
        forms=forms.map(tangent_form),
        out=tuple(out[j] for j in floats),
        linear=lin,
    )
    for j, t in zip(floats, moved, strict=True):
        zeros[j] = t
    return primal_out, zeros


ad.primitive_jvps[_p] = _jvp


def _transpose(cts: Any, *args: Any, forms: Forms, out: Any, linear: Any) -> Any:
    undefined = [ad.is_undefined_primal(a) for a in args]
    if not all(linear[i] for i, u in enumerate(undefined) if u):
        raise NotImplementedError("jaxpool: transposing a nonlinear form")
    consts = [a for a, u in zip(args, undefined, strict=True) if not u]
    avals = [a.aval for a, u in zip(args, undefined, strict=True) if u]
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    m = len(consts)

    def transposed_form(form: Form) -> Form:
        def run(*given: jax.Array) -> list[jax.Array]:
            def apply(*xs: jax.Array) -> list[jax.Array]:
                it, fixed = iter(xs), iter(given[:m])
                full = [next(it) if u else next(fixed) for u in undefined]
                return list(form(*full))

            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
            return list(jax.linear_transpose(apply, *specs)(list(given[m:])))

        return run

    results = iter(
        _p.bind(
            *consts,
            *cts,
            forms=forms.map(transposed_form),
            out=tuple(avals),
            linear=(False,) * m + (True,) * len(cts),
        )
    )
    return [next(results) if u else None for u in undefined]


ad.primitive_transposes[_p] = _transpose
