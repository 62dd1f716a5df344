"""`torch.optim` for the client: the engine's optimizers and schedulers (`engine.optim`, written once),
with the client's Variable registered so that a step's new parameter and state values, recorded as
expressions, are fetched together: one `/forward` per `optimizer.step()` against a server, none embedded.
With `resident=True` on a remote session the optimizers keep their parameters on the server instead
(`client.optim.resident`): a step sends its batch and the update only."""

from client.optim import lr_scheduler
from client.optim.resident import Resident
from client.session import current_session
from client.state import mode
from client.variable import Variable
from engine import optim as engine_optim
from engine.nn.missing import missing
from engine.optim import Optimizer, optimizer


def _realise(variables) -> None:
    """The values of `variables`, computed in one request (none when they are all known)."""
    current_session().fetch(*variables)


optimizer.register(Variable, mode, _realise)


class SGD(Resident, engine_optim.SGD):
    """`torch.optim.SGD`; on a remote session its parameters stay on the server (`client.optim.resident`)."""


class Adam(Resident, engine_optim.Adam):
    """`torch.optim.Adam`; on a remote session its parameters stay on the server (`client.optim.resident`)."""


class AdamW(Resident, engine_optim.AdamW):
    """`torch.optim.AdamW`; on a remote session its parameters stay on the server (`client.optim.resident`)."""


class RMSprop(Resident, engine_optim.RMSprop):
    """`torch.optim.RMSprop`; on a remote session its parameters stay on the server (`client.optim.resident`)."""


# the engine's step on the client only (the server has no resident optimizer of these)
Adagrad, NAdam, RAdam = engine_optim.Adagrad, engine_optim.NAdam, engine_optim.RAdam
Adamax, Adadelta, ASGD, Rprop = engine_optim.Adamax, engine_optim.Adadelta, engine_optim.ASGD, engine_optim.Rprop
LBFGS = engine_optim.LBFGS

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
    "swa_utils",  # (bound to client.nn by `client`)
]
__getattr__ = missing("torch.optim")
