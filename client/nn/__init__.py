"""`torch.nn` for the client: only `functional`, the engine's `engine.nn.functional` itself, computing
on client Variables by recording the registry's ops (registered here)."""

import client
from client.nn import functional
from engine.nn import functional as _shared

_shared.register(client.Variable, client)

__all__ = ["functional"]

from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn")
