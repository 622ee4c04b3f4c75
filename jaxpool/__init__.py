"""jaxpool: differentiable max pooling with argmax for JAX, PyTorch-exact."""

from ._ops import adaptive_max_pool1d as adaptive_max_pool1d
from ._ops import (
    adaptive_max_pool1d_backward as adaptive_max_pool1d_backward,
)
from ._ops import adaptive_max_pool2d as adaptive_max_pool2d
from ._ops import (
    adaptive_max_pool2d_backward as adaptive_max_pool2d_backward,
)
from ._ops import adaptive_max_pool3d as adaptive_max_pool3d
from ._ops import (
    adaptive_max_pool3d_backward as adaptive_max_pool3d_backward,
)
from ._ops import fractional_max_pool2d as fractional_max_pool2d
from ._ops import (
    fractional_max_pool2d_backward as fractional_max_pool2d_backward,
)
from ._ops import fractional_max_pool3d as fractional_max_pool3d
from ._ops import (
    fractional_max_pool3d_backward as fractional_max_pool3d_backward,
)
from ._ops import max_pool1d_with_argmax as max_pool1d_with_argmax
from ._ops import (
    max_pool1d_with_argmax_backward as max_pool1d_with_argmax_backward,
)
from ._ops import max_pool2d_with_argmax as max_pool2d_with_argmax
from ._ops import (
    max_pool2d_with_argmax_backward as max_pool2d_with_argmax_backward,
)
from ._ops import max_pool3d_with_argmax as max_pool3d_with_argmax
from ._ops import (
    max_pool3d_with_argmax_backward as max_pool3d_with_argmax_backward,
)
from ._ops import max_unpool1d as max_unpool1d
from ._ops import max_unpool2d as max_unpool2d
from ._ops import max_unpool3d as max_unpool3d

__version__ = "0.2.0"

__all__ = [
    "adaptive_max_pool1d",
    "adaptive_max_pool1d_backward",
    "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
    "adaptive_max_pool3d",
    "adaptive_max_pool3d_backward",
    "fractional_max_pool2d",
    "fractional_max_pool2d_backward",
    "fractional_max_pool3d",
    "fractional_max_pool3d_backward",
    "max_pool1d_with_argmax",
    "max_pool1d_with_argmax_backward",
    "max_pool2d_with_argmax",
    "max_pool2d_with_argmax_backward",
    "max_pool3d_with_argmax",
    "max_pool3d_with_argmax_backward",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
]
