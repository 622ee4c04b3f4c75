"""Strict JAX numerics for every test (warnings are errors: see pyproject.toml)."""

import jax

jax.config.update("jax_numpy_rank_promotion", "raise")
