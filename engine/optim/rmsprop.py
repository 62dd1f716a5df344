"""`torch.optim.RMSprop`: alpha, eps, weight_decay, momentum, centered and `maximize`, by PyTorch's
single-tensor update."""

from __future__ import annotations

from engine.optim.optimizer import Optimizer, lerp, scalar, state_value, step_tensor


class RMSprop(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-2,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0,
        momentum=0,
        centered=False,
        capturable=False,
        foreach=None,
        maximize=False,
        differentiable=False,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        if capturable or differentiable:
            raise NotImplementedError("RMSprop: capturable= and differentiable= are not supported")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "alpha": alpha,
            "eps": eps,
            "centered": centered,
            "weight_decay": weight_decay,
            "capturable": capturable,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    def _update(self, update, group, param):
        alpha, eps, momentum, lr = group["alpha"], group["eps"], group["momentum"], group["lr"]
        state = self.state[param]
        if len(state) == 0:
            state["step"] = step_tensor(param, 0.0)
            state["square_avg"] = param.new_zeros(param.shape)
            if momentum > 0:
                state["momentum_buffer"] = param.new_zeros(param.shape)
            if group["centered"]:
                state["grad_avg"] = param.new_zeros(param.shape)
        grad = -param.grad if group["maximize"] else param.grad
        state["step"] = step_tensor(param, state_value(state["step"]) + 1)
        if group["weight_decay"] != 0:
            grad = grad + param * group["weight_decay"]
        square_avg = state["square_avg"] * alpha + grad * (1 - alpha) * grad
        update.state(state, "square_avg", square_avg)
        if group["centered"]:
            grad_avg = lerp(state["grad_avg"], grad, 1 - alpha)
            update.state(state, "grad_avg", grad_avg)
            avg = (square_avg + grad_avg * -1 * grad_avg).sqrt()
        else:
            avg = square_avg.sqrt()
        avg = avg + eps
        if momentum > 0:
            buf = state["momentum_buffer"] * momentum + grad / avg
            update.state(state, "momentum_buffer", buf)
            update.param(param, param + buf * scalar(param, -lr))
        else:
            update.param(param, param + grad * scalar(param, -lr) / avg)
