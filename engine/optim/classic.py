"""`torch.optim.Rprop` (per-element step sizes grown or shrunk by the gradient's sign) and `ASGD` (averaged
SGD), by PyTorch's single-tensor updates: their state names, `step`, ASGD's `eta` and `mu` as float32 0-d
tensors as PyTorch keeps them (so their values are rounded to float32 as there), and `maximize`."""

from __future__ import annotations

from engine.optim.adaptive import _options
from engine.optim.optimizer import Optimizer, scalar, state_value, step_tensor


def _refuse(name, capturable, differentiable):
    if capturable or differentiable:
        raise NotImplementedError(f"{name}: capturable= and differentiable= are not supported")


class Rprop(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-2,
        etas=(0.5, 1.2),
        step_sizes=(1e-6, 50),
        *,
        capturable=False,
        foreach=None,
        maximize=False,
        differentiable=False,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        _refuse("Rprop", capturable, differentiable)
        super().__init__(params, _options(locals()))

    def _update(self, update, group, param):
        state = self.state[param]
        if len(state) == 0:
            state["step"] = step_tensor(param, 0.0)
            state["prev"] = param.new_zeros(param.shape)
            state["step_size"] = param.new_full(param.shape, group["lr"])
        state["step"] = step_tensor(param, state_value(state["step"]) + 1)
        (etaminus, etaplus), (low, high) = group["etas"], group["step_sizes"]
        grad = -param.grad if group["maximize"] else param.grad
        sign = (grad * state["prev"]).sign()
        factor = sign.where(sign <= 0, scalar(param, etaplus))
        factor = factor.where(factor >= 0, scalar(param, etaminus))
        factor = factor.where(factor != 0, scalar(param, 1.0))
        step_size = (state["step_size"] * factor).clamp(low, high)
        grad = grad.where(factor != etaminus, scalar(param, 0.0))
        update.state(state, "step_size", step_size)
        update.state(state, "prev", grad)
        update.param(param, param - grad.sign() * step_size)


class ASGD(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-2,
        lambd=1e-4,
        alpha=0.75,
        t0=1e6,
        weight_decay=0,
        foreach=None,
        maximize=False,
        differentiable=False,
        capturable=False,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        _refuse("ASGD", capturable, differentiable)
        super().__init__(params, _options(locals()))

    def _update(self, update, group, param):
        state = self.state[param]
        if len(state) == 0:
            state["step"] = step_tensor(param, 0.0)
            state["eta"] = step_tensor(param, group["lr"])
            state["mu"] = step_tensor(param, 1.0)
            state["ax"] = param.new_zeros(param.shape)
        step = state_value(state["step"]) + 1
        state["step"] = step_tensor(param, step)
        lr, lambd, eta, mu = group["lr"], group["lambd"], state_value(state["eta"]), state_value(state["mu"])
        grad = -param.grad if group["maximize"] else param.grad
        if group["weight_decay"] != 0:
            grad = grad + param * group["weight_decay"]
        value = param * scalar(param, 1 - lambd * eta) + grad * scalar(param, -eta)
        update.param(param, value)
        update.state(state, "ax", state["ax"] + (value - state["ax"]) * scalar(param, mu) if mu != 1 else value)
        state["eta"] = step_tensor(param, lr / ((1 + lambd * lr * step) ** group["alpha"]))
        state["mu"] = step_tensor(param, 1 / max(1, step - group["t0"]))
