"""adaptive_max_pool{1,2,3}d, what is its own: its windows, the strided path of
integer ratios, large planes (the oracle grids: test_oracle.py; torch's:
test_torch.py; transformations: test_transforms.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from helpers import assert_same, require

import jaxpool
from jaxpool import reference


def test_windows_follow_the_exact_integer_formula():
    # 10 -> 3: [0, 4), [3, 7), [6, 10): overlapping, and not the vendor's typo.
    x = jnp.zeros((1, 1, 10, 1)).at[0, 0, 3, 0].set(1.0).at[0, 0, 6, 0].set(2.0)
    values, indices = jaxpool.adaptive_max_pool2d(x, (3, 1))
    assert values.ravel().tolist() == [1.0, 2.0, 2.0]
    assert indices.ravel().tolist() == [3, 6, 6]
    # Output larger than input: windows repeat elements.
    values, indices = jaxpool.adaptive_max_pool2d(
        jnp.arange(2.0).reshape(1, 2, 1), (3, 1)
    )
    assert indices.ravel().tolist() == [0, 1, 1]  # [0,1), [0,2), [1,2)


def test_integer_ratio_is_a_plain_strided_pool():
    # Uniform windows (one size, one step) are a strided pool and take its
    # path, whose only gather in the CPU program is the read-back of the
    # values; others take two sizes and are reduced one axis at a time, each
    # from a copy of the axis (a gather) unless its windows tile it.
    from jaxpool._windows import adaptive_axis

    assert adaptive_axis(56, 7)._replace(size=0) == (0, 7, 8, 8, 0, 1, (), ())
    assert not adaptive_axis(50, 7).starts  # size 8, step 7
    assert adaptive_axis(56, 6).starts == (0, 9, 18, 28, 37, 46)
    x = jnp.zeros((2, 3, 56, 56))

    def gathers(output_size):
        f = jax.jit(lambda x: jaxpool.adaptive_max_pool2d(x, output_size))
        lowered = f.trace(x).lower(lowering_platforms=("cpu",))
        return lowered.as_text().count('"stablehlo.gather"')

    assert gathers(7) == gathers((7, 6)) == 1


def test_many_windows_of_two_sizes_are_read_from_a_copy_on_the_cpu():
    # Along an axis of few windows (at most FEW_TAPS taps in all) the CPU
    # picks each window by a slice (above: no gather); along one of more it
    # scans a copy of every window's taps (test_export.py counts its
    # gathers): 97 -> 13 holds 13 windows of up to 9 taps, 131 -> 17 17 of up
    # to 9. The same values and indices as the oracle's, ties and a NaN too.
    from jaxpool import _scan
    from jaxpool._windows import adaptive_axis

    taps = [adaptive_axis(n, o) for n, o in ((97, 13), (131, 17), (56, 6))]
    assert [w.out * w.taps > _scan.FEW_TAPS for w in taps] == [True, True, False]
    x = np.random.default_rng(0).standard_normal((2, 3, 97, 131), np.float32)
    x[0, 1, 40:50, 60:70], x[1, 2, 8, 9] = 1.0, np.nan
    values, indices = jax.jit(lambda x: jaxpool.adaptive_max_pool2d(x, (13, 17)))(x)
    want = reference.adaptive_max_pool(x, (13, 17))
    assert_same(values, want[0])
    np.testing.assert_array_equal(indices, want[1])


def test_large_plane_beyond_float32_window_arithmetic():
    # j * W exceeds 2**24 here: float32 window bounds put a start in the wrong
    # place (column 4998 of 4999), exact integer ones do not.
    torch = require("torch")
    w = np.arange(4999)
    f32 = np.floor(w.astype(np.float32) * np.float32(5000) / np.float32(4999))
    assert (f32 != (w * 5000) // 4999).any()
    x = np.random.default_rng(0).standard_normal((1, 1, 4099, 5000)).astype(np.float32)
    values, indices = jax.jit(lambda x: jaxpool.adaptive_max_pool2d(x, (4097, 4999)))(x)
    tv, ti = torch.nn.functional.adaptive_max_pool2d(
        torch.from_numpy(x), (4097, 4999), return_indices=True
    )
    assert_same(values, tv.numpy(), "values")
    assert_same(indices, ti.numpy().astype(np.int32), "indices")
