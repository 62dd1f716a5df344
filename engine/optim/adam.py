"""`torch.optim.Adam` and `AdamW` (Adam with decoupled weight decay): betas, eps, weight_decay, amsgrad and
`maximize`, by PyTorch's single-tensor update (`step` a float32 count in each parameter's state)."""

from __future__ import annotations

from engine.optim.optimizer import Optimizer, lerp, scalar, state_value, step_tensor


class Adam(Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        amsgrad=False,
        *,
        foreach=None,
        maximize=False,
        capturable=False,
        differentiable=False,
        fused=None,
        decoupled_weight_decay=False,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if capturable or differentiable or fused:
            raise NotImplementedError(
                f"{type(self).__name__}: capturable=, differentiable= and fused= are not supported"
            )
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "foreach": foreach,
            "capturable": capturable,
            "differentiable": differentiable,
            "fused": fused,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        super().__init__(params, defaults)

    def _update(self, update, group, param):
        beta1, beta2 = group["betas"]
        lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
        state = self.state[param]
        if len(state) == 0:
            state["step"] = step_tensor(param, 0.0)
            state["exp_avg"] = param.new_zeros(param.shape)
            state["exp_avg_sq"] = param.new_zeros(param.shape)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = param.new_zeros(param.shape)
        grad = -param.grad if group["maximize"] else param.grad
        step = state_value(state["step"]) + 1
        state["step"] = step_tensor(param, step)
        value = param
        if weight_decay != 0:
            if group["decoupled_weight_decay"]:
                value = param * scalar(param, 1 - lr * weight_decay)
            else:
                grad = grad + param * weight_decay
        exp_avg = lerp(state["exp_avg"], grad, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + grad * (1 - beta2) * grad
        update.state(state, "exp_avg", exp_avg)
        update.state(state, "exp_avg_sq", exp_avg_sq)
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        second = exp_avg_sq
        if group["amsgrad"]:
            second = state["max_exp_avg_sq"].maximum(exp_avg_sq)
            update.state(state, "max_exp_avg_sq", second)
        denom = second.sqrt() / scalar(param, bias_correction2**0.5) + eps
        update.param(param, value + exp_avg * scalar(param, -step_size) / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay (default 1e-2): the parameter shrinks by lr * weight_decay first."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=1e-2,
        amsgrad=False,
        *,
        maximize=False,
        foreach=None,
        capturable=False,
        differentiable=False,
        fused=None,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )
