"""`torch.utils` for the client: `data` (`client.utils.data`) and `checkpoint` (the engine's, written once)."""

from client.utils import data
from engine.nn import checkpoint

__all__ = ["checkpoint", "data"]
