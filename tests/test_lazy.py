"""The seam traces a platform's form only when a program is lowered for it
(``jaxpool._lazy``), and its rules give what ``lax.platform_dependent``
would: under ``vmap``, ``jvp``, ``grad`` of ``grad`` and ``jax.export`` to
one platform or several."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxpool
from jaxpool import _platform

SCALE = {"cpu": 1.0, "tpu": 2.0, "gpu": 3.0}


def _counted(traced: list[str]):
    """A kernel whose form on each platform is ``sin(x) * scale + y`` (with
    an integer input and output beside), recording each form's trace."""

    def emit(form: str):
        def kernel(x, y, n):
            traced.append(form)
            return jnp.sin(x) * SCALE[form] + y, n * 2

        return kernel

    def fn(x, y, n):
        out = (
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct(n.shape, n.dtype),
        )
        return _platform.by_platform(
            emit, x, y, n, cpu="cpu", tpu="tpu", default="gpu", out=out
        )

    return fn


def _args():
    x = jnp.linspace(-2.0, 2.0, 6, dtype=jnp.float32).reshape(2, 3)
    return (
        x,
        jnp.ones((2, 3), jnp.float32),
        jnp.arange(6, dtype=jnp.int32).reshape(2, 3),
    )


def test_only_the_lowered_platforms_form_is_traced():
    traced: list[str] = []
    fn = jax.jit(_counted(traced))
    x, y, n = _args()
    staged = fn.trace(x, y, n)
    assert traced == []  # tracing the program traces no form
    staged.lower()
    assert traced == ["cpu"]
    values, doubled = fn(x, y, n)
    np.testing.assert_allclose(values, np.sin(x) + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(doubled, n * 2)


@pytest.mark.parametrize(
    "platforms, scale", [(["tpu"], 2.0), (["cuda"], 3.0), (["cpu", "tpu"], 1.0)]
)
def test_export_lowers_each_platforms_form(platforms, scale):
    traced: list[str] = []
    exported = export.export(
        jax.jit(_counted(traced)),
        platforms=platforms,
        disabled_checks=[export.DisabledSafetyCheck.platform()],
    )(*_args())
    assert sorted(set(traced)) == sorted(
        {"cpu": "cpu", "tpu": "tpu", "cuda": "gpu"}[p] for p in platforms
    )
    x, y, n = _args()
    values, _ = exported.call(x, y, n)  # on this CPU, the first platform's form
    np.testing.assert_allclose(values, np.sin(x) * scale + 1.0, rtol=1e-6)


def test_transformations_are_the_forms_own():
    fn = _counted([])
    x, y, n = _args()

    def loss(x, y):
        return jnp.sum(fn(x, y, n)[0] ** 2)

    # vmap over x alone, y and n unbatched
    batched = jax.jit(jax.vmap(lambda x: fn(x, y, n)[0]))(jnp.stack([x, -x]))
    np.testing.assert_allclose(batched[1], np.sin(-x) + 1.0, rtol=1e-6)
    # jvp: d/dx (sin x + y) = cos x
    _, tangent = jax.jit(lambda x, t: jax.jvp(lambda x: fn(x, y, n)[0], (x,), (t,)))(
        x, jnp.ones_like(x)
    )
    np.testing.assert_allclose(tangent, np.cos(x), rtol=1e-6)
    # grad: 2 (sin x + y) cos x; grad of grad's sum: d/dx of that
    grad = jax.jit(jax.grad(loss))(x, y)
    np.testing.assert_allclose(grad, 2 * (np.sin(x) + 1) * np.cos(x), rtol=1e-5)
    second = jax.jit(jax.grad(lambda x: jnp.sum(jax.grad(loss)(x, y))))(x)
    want = 2 * (np.cos(x) ** 2 - (np.sin(x) + 1) * np.sin(x))
    np.testing.assert_allclose(second, want, rtol=1e-5, atol=1e-6)
    # the gradient with respect to y, linear in it: 2 (sin x + y)
    np.testing.assert_allclose(
        jax.jit(jax.grad(loss, argnums=1))(x, y), 2 * (np.sin(x) + 1), rtol=1e-6
    )


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_under_a_mesh_the_form_is_traced_with_it(axis_type):
    """Under a mesh of Auto axes the form is traced when the program is
    lowered, with the mesh of the call in context (the forms read it), even
    lowered outside it; with Explicit axes, whose types the forms' outputs
    must carry, ``lax.platform_dependent`` traces every form with the call."""
    seen: list[tuple[str, tuple[str, ...]]] = []

    def emit(form: str):
        def kernel(x):
            seen.append((form, jax.sharding.get_abstract_mesh().axis_names))
            return x * SCALE[form]

        return kernel

    def fn(x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return _platform.by_platform(
            emit, x, cpu="cpu", tpu="tpu", default="gpu", out=out
        )

    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((1,), ("planes",), axis_types=(kind,))
    x = jnp.arange(4.0)
    with jax.set_mesh(mesh):
        staged = jax.jit(fn).trace(x)
    traced_with_the_call = list(seen)
    staged.lower()
    if axis_type == "Auto":
        assert traced_with_the_call == []
        assert seen == [("cpu", ("planes",))]
    else:
        assert sorted(traced_with_the_call) == [
            ("cpu", ("planes",)),
            ("gpu", ("planes",)),
            ("tpu", ("planes",)),
        ]
        assert seen == traced_with_the_call
    with jax.set_mesh(mesh):
        np.testing.assert_array_equal(jax.jit(fn)(x), np.arange(4.0))


def test_a_form_shaped_unlike_its_outputs_fails_at_lowering():
    def emit(form):
        return lambda x: x[:1]

    def fn(x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return _platform.by_platform(emit, x, cpu=1, tpu=2, default=3, out=out)

    with pytest.raises(RuntimeError, match="a form returned"):
        jax.jit(fn).lower(jnp.ones((2, 3)))


def test_a_pool_stages_one_primitive_and_no_branches():
    x = jnp.ones((2, 3, 8, 8), jnp.float32)
    step = jax.value_and_grad(
        lambda x: jnp.sum(jaxpool.max_pool2d_with_argmax(x, 3, 2, 1)[0])
    )
    text = str(jax.make_jaxpr(step)(x))
    assert "jaxpool_platform_dependent" in text
    assert "cond[" not in text and "platform_index" not in text
