"""`torch.optim.NAdam`, `RAdam`, `Adamax` and `Adadelta`: Adam's relatives, each by PyTorch's single-tensor
update (its state names, `step` a float32 count, NAdam's `mu_product` a float32 product as PyTorch keeps it),
with `maximize` and weight_decay (NAdam's and RAdam's `decoupled_weight_decay` too)."""

from __future__ import annotations

import numpy

from engine.optim.optimizer import Optimizer, lerp, scalar, state_value, step_tensor


def _check(lr, eps, betas, weight_decay, capturable, differentiable, name):
    """PyTorch's argument checks, and the step kinds not supported here."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if capturable or differentiable:
        raise NotImplementedError(f"{name}: capturable= and differentiable= are not supported")


def _options(arguments: dict) -> dict:
    """An optimizer's defaults: its keyword arguments, as PyTorch's optimizers keep them."""
    return {k: v for k, v in arguments.items() if k not in ("self", "params", "__class__")}


class _Moments(Optimizer):
    """The first steps of Adam's relatives: state made, step counted, gradient (maximize, weight decay)."""

    def _start(self, group, param, names):
        state = self.state[param]
        if len(state) == 0:
            state["step"] = step_tensor(param, 0.0)
            if isinstance(self, NAdam):
                state["mu_product"] = step_tensor(param, 1.0)
            for name in names:
                state[name] = param.new_zeros(param.shape)
        step = state_value(state["step"]) + 1
        state["step"] = step_tensor(param, step)
        grad, value, weight_decay = -param.grad if group["maximize"] else param.grad, param, group["weight_decay"]
        if weight_decay != 0:
            if group.get("decoupled_weight_decay"):
                value = param * scalar(param, 1 - group["lr"] * weight_decay)
            else:
                grad = grad + param * weight_decay
        return state, step, grad, value

    def _averages(self, update, group, state, grad):
        beta1, beta2 = group["betas"]
        exp_avg = lerp(state["exp_avg"], grad, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + grad * (1 - beta2) * grad
        update.state(state, "exp_avg", exp_avg)
        update.state(state, "exp_avg_sq", exp_avg_sq)
        return exp_avg, exp_avg_sq


class NAdam(_Moments):
    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        momentum_decay=4e-3,
        decoupled_weight_decay=False,
        *,
        foreach=None,
        maximize=False,
        capturable=False,
        differentiable=False,
    ):
        _check(lr, eps, betas, weight_decay, capturable, differentiable, "NAdam")
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        super().__init__(params, _options(locals()))

    def _update(self, update, group, param):
        state, step, grad, value = self._start(group, param, ("exp_avg", "exp_avg_sq"))
        (beta1, beta2), lr, decay = group["betas"], group["lr"], group["momentum_decay"]
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * decay)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * decay)))
        held = state["mu_product"]  # (float32, or the parameter's dtype once loaded: PyTorch's `mu_product *= mu`)
        kind = numpy.dtype(held.dtype).type
        mu_product = float(kind(state_value(held)) * kind(mu))
        state["mu_product"] = step_tensor(param, mu_product, like=held)
        exp_avg, exp_avg_sq = self._averages(update, group, state, grad)
        denom = (exp_avg_sq / scalar(param, 1 - beta2**step)).sqrt() + group["eps"]
        value = value + grad * scalar(param, -lr * (1.0 - mu) / (1.0 - mu_product)) / denom
        update.param(param, value + exp_avg * scalar(param, -lr * mu_next / (1.0 - mu_product * mu_next)) / denom)


class RAdam(_Moments):
    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        decoupled_weight_decay=False,
        *,
        foreach=None,
        maximize=False,
        capturable=False,
        differentiable=False,
    ):
        _check(lr, eps, betas, weight_decay, capturable, differentiable, "RAdam")
        super().__init__(params, _options(locals()))

    def _update(self, update, group, param):
        state, step, grad, value = self._start(group, param, ("exp_avg", "exp_avg_sq"))
        (beta1, beta2), lr = group["betas"], group["lr"]
        exp_avg, exp_avg_sq = self._averages(update, group, state, grad)
        corrected = exp_avg / scalar(param, 1 - beta1**step)
        bias_correction2 = 1 - beta2**step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2**step) / bias_correction2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            adaptive = scalar(param, bias_correction2**0.5) / (exp_avg_sq.sqrt() + group["eps"])
            update.param(param, value - corrected * scalar(param, lr) * adaptive * scalar(param, rect))
        else:
            update.param(param, value - corrected * scalar(param, lr))


class Adamax(_Moments):
    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        foreach=None,
        *,
        maximize=False,
        differentiable=False,
        capturable=False,
    ):
        _check(lr, eps, betas, weight_decay, capturable, differentiable, "Adamax")
        super().__init__(params, _options(locals()))

    def _update(self, update, group, param):
        state, step, grad, value = self._start(group, param, ("exp_avg", "exp_inf"))
        beta1, beta2 = group["betas"]
        exp_avg = lerp(state["exp_avg"], grad, 1 - beta1)
        exp_inf = (state["exp_inf"] * beta2).maximum(grad.abs() + group["eps"])
        update.state(state, "exp_avg", exp_avg)
        update.state(state, "exp_inf", exp_inf)
        clr = group["lr"] / (1 - beta1**step)
        update.param(param, value + exp_avg / exp_inf * scalar(param, -clr))


class Adadelta(_Moments):
    def __init__(
        self,
        params,
        lr=1.0,
        rho=0.9,
        eps=1e-6,
        weight_decay=0,
        foreach=None,
        *,
        capturable=False,
        maximize=False,
        differentiable=False,
    ):
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check(lr, eps, (), weight_decay, capturable, differentiable, "Adadelta")
        super().__init__(params, _options(locals()))

    def _update(self, update, group, param):
        state, _, grad, value = self._start(group, param, ("square_avg", "acc_delta"))
        rho, eps = group["rho"], group["eps"]
        square_avg = state["square_avg"] * rho + grad * (1 - rho) * grad
        delta = (state["acc_delta"] + eps).sqrt() / (square_avg + eps).sqrt() * grad
        update.state(state, "square_avg", square_avg)
        update.state(state, "acc_delta", state["acc_delta"] * rho + delta * (1 - rho) * delta)
        update.param(param, value + delta * scalar(param, -group["lr"]))
