"""`torch.optim.SGD`: stochastic gradient descent with momentum (dampening, Nesterov), weight decay and
`maximize`, by PyTorch's single-tensor update; `sgd_in_place`, the same update on bare arrays, written in place
(the server's step of resident parameters, `wire.resident_update`)."""

from __future__ import annotations

from engine.optim.optimizer import Optimizer, scalar


class SGD(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        momentum=0,
        dampening=0,
        weight_decay=0,
        nesterov=False,
        *,
        maximize=False,
        foreach=None,
        differentiable=False,
        fused=None,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable or fused:
            raise NotImplementedError("SGD: differentiable= and fused= are not supported")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
            "foreach": foreach,
            "differentiable": differentiable,
            "fused": fused,
        }
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def _step(self, update):
        for group in self.param_groups:
            momentum, dampening = group["momentum"], group["dampening"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = -param.grad if group["maximize"] else param.grad
                if group["weight_decay"] != 0:
                    grad = grad + param * group["weight_decay"]
                if momentum != 0:
                    state = self.state[param]
                    buf = state.get("momentum_buffer")
                    buf = grad.detach().clone() if buf is None else buf * momentum + grad * (1 - dampening)
                    update.state(state, "momentum_buffer", buf)
                    grad = grad + buf * momentum if group["nesterov"] else buf
                update.param(param, param + grad * scalar(param, -group["lr"]))


def sgd_in_place(param, grad, state: dict, group: dict) -> None:
    """`SGD`'s step of one parameter on arrays: `param` (and `state`'s "momentum_buffer", made on the first
    step with momentum) written in place, `grad` only read; `group` holds SGD's options (a param group).
    The operations and their order are `SGD._step`'s, so the values are the same bit for bit."""
    lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        grad = grad + param * group["weight_decay"]
    if momentum != 0:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = grad.copy()
        else:
            buf *= momentum
            buf += grad * (1 - dampening)
        grad = grad + buf * momentum if group["nesterov"] else buf
    step = grad * param.dtype.type(-lr)  # (scalar(): -lr in param's dtype)
    param += step
