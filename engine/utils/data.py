"""`torch.utils.data` for the engine: `engine.utils.loading` bound to the engine's Variable."""

import engine
from engine.utils import loading

_NAMES = loading.bind(engine, __name__)
globals().update(_NAMES)

__all__ = sorted(_NAMES)
