"""jaxpool: differentiable max pooling with argmax for JAX, PyTorch-exact."""

from ._max_pool3d import max_pool3d_with_argmax as max_pool3d_with_argmax
from ._max_pool3d import (
    max_pool3d_with_argmax_backward as max_pool3d_with_argmax_backward,
)

__version__ = "0.1.0"

__all__ = [
    "max_pool3d_with_argmax",
    "max_pool3d_with_argmax_backward",
]
