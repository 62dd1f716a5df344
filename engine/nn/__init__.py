"""`torch.nn` for the engine: only `functional` (`engine.nn.functional`), whose functions compute on
any registered Variable class; importing this registers the engine's."""

import engine
from engine.nn import functional

functional.register(engine.Variable, engine)

__all__ = ["functional"]

from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn")
