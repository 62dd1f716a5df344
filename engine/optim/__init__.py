"""`torch.optim` for the engine: `Optimizer`, `SGD`, `Adam`, `AdamW`, `RMSprop`, `Adagrad`, `NAdam`, `RAdam`, `Adamax`, `Adadelta`, `ASGD`, `Rprop`, `LBFGS` and
`lr_scheduler` (`StepLR`, `CosineAnnealingLR`, `ReduceLROnPlateau`...) and `swa_utils` (`engine.optim.averaging`,
bound to `engine.nn` by `engine`), written once for every Variable
class: they update parameters through the Variable's public methods, each step's out-of-place update
committed at once (`engine.optim.optimizer`). Importing this registers the engine's Variable;
`client.optim` registers the client's, with its one-request realise."""

from engine.grad_mode import mode
from engine.nn.missing import missing
from engine.optim import lr_scheduler, optimizer
from engine.optim.adagrad import Adagrad
from engine.optim.adam import Adam, AdamW
from engine.optim.adaptive import Adadelta, Adamax, NAdam, RAdam
from engine.optim.classic import ASGD, Rprop
from engine.optim.lbfgs import LBFGS
from engine.optim.optimizer import Optimizer
from engine.optim.rmsprop import RMSprop
from engine.optim.sgd import SGD, sgd_in_place
from engine.variable import Variable

optimizer.register(Variable, mode)

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "NAdam",
    "RAdam",
    "Adamax",
    "Adadelta",
    "ASGD",
    "Rprop",
    "LBFGS",
    "lr_scheduler",
    "swa_utils",
    "sgd_in_place",
]
__getattr__ = missing("torch.optim")
