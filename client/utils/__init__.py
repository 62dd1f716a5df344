"""`torch.utils` for the client: `data` (`client.utils.data`)."""

from client.utils import data

__all__ = ["data"]
