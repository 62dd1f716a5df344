"""`torch.nn.init` on client Variables: the functions of `engine.nn.init`, defined once there (they take
their random source and `no_grad` from the package of the tensor they fill)."""

from engine.nn.init import *  # noqa: F403
from engine.nn.init import (
    __all__,  # noqa: F401
    _calculate_fan_in_and_fan_out,  # noqa: F401  (PyTorch programs call it)
    constant,  # noqa: F401  (the deprecated spellings, as PyTorch keeps them)
    dirac,  # noqa: F401
    eye,  # noqa: F401
    kaiming_normal,  # noqa: F401
    kaiming_uniform,  # noqa: F401
    normal,  # noqa: F401
    orthogonal,  # noqa: F401
    sparse,  # noqa: F401
    uniform,  # noqa: F401
    xavier_normal,  # noqa: F401
    xavier_uniform,  # noqa: F401
)
from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn.init")
