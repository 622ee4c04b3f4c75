"""jaxpool: differentiable max pooling with argmax for JAX, PyTorch-exact."""

from ._adaptive import adaptive_max_pool2d as adaptive_max_pool2d
from ._adaptive import (
    adaptive_max_pool2d_backward as adaptive_max_pool2d_backward,
)
from ._max_pool3d import max_pool3d_with_argmax as max_pool3d_with_argmax
from ._max_pool3d import (
    max_pool3d_with_argmax_backward as max_pool3d_with_argmax_backward,
)

__version__ = "0.1.0"

__all__ = [
    "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
    "max_pool3d_with_argmax",
    "max_pool3d_with_argmax_backward",
]
