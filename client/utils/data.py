"""`torch.utils.data` for the client: `engine.utils.loading` bound to the client's Variable (a DataLoader's
batches are client Variables; the indices are drawn by the engine's generators, which the client shares)."""

import client
from engine.utils import loading

_NAMES = loading.bind(client, __name__)
globals().update(_NAMES)

__all__ = sorted(_NAMES)
