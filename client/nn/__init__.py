"""`torch.nn` for the client: `functional`, `init` and `utils` (the engine's `engine.nn.functional`,
`engine.nn.init` and `engine.nn.utils` themselves, computing on client Variables by recording the
registry's ops), and `Parameter` and the modules of `engine.nn.module_classes` bound to the client's Variable
(a client `Parameter` is a client Variable)."""

import client
from client.nn import functional, init
from engine.nn import functional as _shared
from engine.nn import grad, utils
from engine.nn import module_classes as _modules

_shared.register(client.Variable, client)
globals().update(_modules.bind(client, __name__))

__all__ = ["functional", "grad", "init", "utils", "Parameter", "Module", *(cls.__name__ for cls in _modules.GENERIC)]

from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn")
