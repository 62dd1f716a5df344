"""`torch.utils` for the engine: `data` (`engine.utils.data`)."""

from engine.utils import data

__all__ = ["data"]
