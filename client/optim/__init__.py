"""`torch.optim` for the client: the engine's optimizers and schedulers (`engine.optim`, written once),
with the client's Variable registered so that a step's new parameter and state values, recorded as
expressions, are fetched together: one `/forward` per `optimizer.step()` against a server, none embedded."""

from client.optim import lr_scheduler
from client.session import current_session
from client.state import mode
from client.variable import Variable
from engine.nn.missing import missing
from engine.optim import SGD, Adam, AdamW, Optimizer, RMSprop, optimizer


def _realise(variables) -> None:
    """The values of `variables`, computed in one request (none when they are all known)."""
    current_session().fetch(*variables)


optimizer.register(Variable, mode, _realise)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
__getattr__ = missing("torch.optim")
