"""`torch.optim.Adagrad`: lr_decay, weight_decay, initial_accumulator_value, eps and `maximize`, by
PyTorch's single-tensor update (dense gradients); the state made for every parameter at construction."""

from __future__ import annotations

from engine.optim.optimizer import Optimizer, scalar, state_value, step_tensor


class Adagrad(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-2,
        lr_decay=0,
        weight_decay=0,
        initial_accumulator_value=0,
        eps=1e-10,
        foreach=None,
        *,
        maximize=False,
        differentiable=False,
        fused=None,
    ):
        for name, value in (("learning rate", lr), ("lr_decay value", lr_decay), ("weight_decay value", weight_decay)):
            if not 0.0 <= value:
                raise ValueError(f"Invalid {name}: {value}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if differentiable or fused:
            raise NotImplementedError("Adagrad: differentiable= and fused= are not supported")
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
            "fused": fused,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for param in group["params"]:
                state = self.state[param]
                state["step"] = step_tensor(param, 0.0)
                state["sum"] = param.new_full(param.shape, initial_accumulator_value)

    def _update(self, update, group, param):
        state = self.state[param]
        step = state_value(state["step"]) + 1
        state["step"] = step_tensor(param, step)
        grad = -param.grad if group["maximize"] else param.grad
        if group["weight_decay"] != 0:
            grad = grad + param * group["weight_decay"]
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        total = state["sum"] + grad * grad
        update.state(state, "sum", total)
        update.param(param, param + grad / (total.sqrt() + group["eps"]) * scalar(param, -clr))
