"""`warn`: a warning at the line of the program that called into the package (engine or client), however
many of the package's frames (functions, modules, autocast's casting wrapper, the client's) lie between,
as a fixed `stacklevel` cannot know."""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

_PACKAGES = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name, "") for name in ("engine", "client")
)

# NumPy's RuntimeWarnings of an op's IEEE arithmetic (`sqrt` of a negative is nan, `1 / 0` inf), where PyTorch is
# silent: a filter on the engine's frames costs an op nothing (`numpy.errstate` would, each call).
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"engine(\.|$)")


def warn(message, category=UserWarning) -> None:
    """`warnings.warn(message, category)` attributed to the first frame outside engine/ and client/."""
    frame: FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGES):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


WARNED_ONCE: set = set()  # the messages PyTorch warns once a process (TORCH_WARN_ONCE) that were shown


def reversing(ndim) -> None:
    """PyTorch's deprecation warning of `x.T` on a tensor that is not 2-d (`x.mT`, `x.permute` say what is meant),
    once a process as PyTorch's."""
    if ndim != 2:
        once(
            "Tensor.T is deprecated on 0-D tensors. This function is the identity in these cases."
            if ndim == 0
            else "The use of `x.T` on tensors of dimension other than 2 to reverse their shape is deprecated and it will "
            "throw an error in a future release. Consider `x.mT` to transpose batches of matrices or "
            "`x.permute(*torch.arange(x.ndim - 1, -1, -1))` to reverse the dimensions of a tensor."
        )


def once(message) -> None:
    if message not in WARNED_ONCE:
        WARNED_ONCE.add(message)
        warn(message)
