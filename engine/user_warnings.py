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
