"""`torch.optim.lr_scheduler` on the client: the engine's schedulers (they only change group["lr"])."""

from engine.optim.lr_scheduler import *  # noqa: F403
from engine.optim.lr_scheduler import __all__, __getattr__  # noqa: F401
