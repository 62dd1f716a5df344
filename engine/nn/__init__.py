"""`torch.nn` for the engine: `functional` (`engine.nn.functional`), `init`, `utils`, `Parameter` and the modules of
`engine.nn.module_classes` (`Module`, `Linear`, `Sequential`...), all written once for every Variable class and
bound here to the engine's; importing this registers the engine's Variable with `functional`."""

import engine
from engine.nn import functional, grad, init, module_classes, utils
from engine.variable import Variable

functional.register(Variable, engine)
globals().update(module_classes.bind(engine, __name__))

__all__ = [
    "functional",
    "grad",
    "init",
    "utils",
    "Parameter",
    "Module",
    *(cls.__name__ for cls in module_classes.GENERIC),
]

from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn")
