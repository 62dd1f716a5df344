"""`torch.nn` for the engine: only `functional` (`engine.nn.functional`), whose functions compute on
any registered Variable class; importing this registers the engine's."""

import engine
from engine.nn import functional
from engine.variable import Variable

functional.register(Variable, engine)

__all__ = ["functional"]

from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn")
