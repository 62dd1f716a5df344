"""`torch.optim.swa_utils` (stochastic weight averaging and EMA), ported from torch 2.13's with its behaviour on
CPU: `AveragedModel` (a deep copy of the model whose parameters, or with `use_buffers` also buffers, average the
model's at each `update_parameters`: equally by default, or by `avg_fn` per tensor or `multi_avg_fn` per dtype
group), the averaging functions, `SWALR` and `update_bn`. Written once for every side: `bind` makes the side's
`AveragedModel` (a subclass of its `nn.Module`) and `update_bn` (its BatchNorm classes); each side keeps them as
`optim.swa_utils`."""

from __future__ import annotations

import copy
import math
import types
from typing import Any

import numpy

from engine.optim.lr_scheduler import LRScheduler, _per_group
from engine.optim.optimizer import Step, lerp, side_of

NAMES = [  # torch.optim.swa_utils.__all__
    "AveragedModel",
    "update_bn",
    "SWALR",
    "get_ema_multi_avg_fn",
    "get_swa_multi_avg_fn",
    "get_ema_avg_fn",
    "get_swa_avg_fn",
]


def _check_decay(decay) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def _no_grad(tensor):
    return side_of(tensor).grad_mode.no_grad()


def _commit(updates) -> None:
    """Write each (tensor, new value) pair, the new values computed together (one request on a remote client)."""
    step = Step()
    for tensor, value in updates:
        step.param(tensor, value)
    step.commit()


def get_ema_multi_avg_fn(decay=0.999):
    """The in-place EMA of lists of tensors: ema <- lerp(ema, current, 1 - decay)."""
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _):
        def averaged(p_ema, p_model):
            if p_ema.is_floating_point():
                return lerp(p_ema, p_model, 1 - decay)
            return p_ema * decay + p_model * (1 - decay)

        with _no_grad(ema_param_list[0]):
            _commit((p, averaged(p, q)) for p, q in zip(ema_param_list, current_param_list, strict=True))

    return ema_update


def get_swa_multi_avg_fn():
    """The in-place equal average of lists of tensors over `num_averaged` + 1 models."""

    def swa_update(averaged_param_list, current_param_list, num_averaged):
        count = int(num_averaged) + 1
        weight = float(numpy.float32(1 / count)) if hasattr(num_averaged, "dtype") else 1 / count  # (torch's float32)

        def averaged(p, p_model):
            return lerp(p, p_model, weight) if p.is_floating_point() else p + (p_model - p) / count

        with _no_grad(averaged_param_list[0]):
            _commit((p, averaged(p, q)) for p, q in zip(averaged_param_list, current_param_list, strict=True))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """The EMA of one tensor: decay * ema + (1 - decay) * current."""
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with _no_grad(ema_param):
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """The equal average of one tensor: averaged + (current - averaged) / (num_averaged + 1)."""

    def swa_update(averaged_param, current_param, num_averaged):
        with _no_grad(averaged_param):
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class _AveragedModel:
    """The averaged copy of `model` (its forward is the copy's); `n_averaged` (a long buffer) counts the
    updates. The first update copies the model's values; `avg_fn` and `multi_avg_fn` are not saved."""

    _ns: Any
    register_buffer: Any
    n_averaged: Any

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        ns = self._ns
        self.register_buffer("n_averaged", ns.tensor(0, dtype=ns.long, device=device))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model) -> None:
        def tensors(module):
            return [*module.parameters(), *module.buffers()] if self.use_buffers else list(module.parameters())

        pairs = list(zip(tensors(self.module), tensors(model)))
        count, updates = self.n_averaged, []
        with self._ns.no_grad():
            if int(count) == 0:
                updates = pairs
            elif self.avg_fn is not None:
                updates = [(p_averaged, self.avg_fn(p_averaged, p_model, count)) for p_averaged, p_model in pairs]
            elif self.multi_avg_fn is None:
                updates = [(p_averaged, get_swa_avg_fn()(p_averaged, p_model, count)) for p_averaged, p_model in pairs]
            else:  # in place, a call for each dtype
                groups: dict = {}
                for p_averaged, p_model in pairs:
                    group = groups.setdefault(p_averaged.dtype, ([], []))
                    group[0].append(p_averaged)
                    group[1].append(p_model)
                for averaged, current in groups.values():
                    self.multi_avg_fn(averaged, current, count)
            if not self.use_buffers:  # the buffers follow the model's
                updates += list(zip(self.module.buffers(), model.buffers(), strict=True))
            updates.append((count, count + 1))  # n_averaged += 1, computed with the rest
        _commit(updates)


class SWALR(LRScheduler):
    """Anneals each group's lr to its `swa_lr` over `anneal_epochs` steps ('cos' or 'linear'), then holds it."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        for lr, group in zip(_per_group("swa_lr", optimizer, swa_lr), optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha) for group in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [group["swa_lr"] * alpha + lr * (1 - alpha) for group, lr in zip(groups, prev_lrs, strict=True)]

    def _set_anneal_func(self, anneal_strategy) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)


def bind(nn) -> types.SimpleNamespace:
    """A side's `torch.optim.swa_utils`, its `AveragedModel` a subclass of `nn.Module`."""
    where = {"__module__": nn.__name__.replace(".nn", ".optim.swa_utils"), "__doc__": _AveragedModel.__doc__}
    averaged = type("AveragedModel", (_AveragedModel, nn.Module), where)
    batch_norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)

    def update_bn(loader, model, device=None) -> None:
        """Recompute the BatchNorm layers' running statistics (a cumulative average) over one pass of `loader`
        (a batch: a tensor, or a list or tuple whose first element is the model's input)."""
        momenta = {}
        for module in model.modules():
            if isinstance(module, batch_norms):
                module.reset_running_stats()
                momenta[module] = module.momentum
        if not momenta:
            return
        was_training = model.training
        model.train()
        for module in momenta:
            module.momentum = None
        with model._ns.no_grad():
            for input in loader:
                if isinstance(input, (list, tuple)):
                    input = input[0]
                model(input if device is None else input.to(device))
        for module, momentum in momenta.items():
            module.momentum = momentum
        model.train(was_training)

    names = {k: v for k, v in globals().items() if k in NAMES}
    return types.SimpleNamespace(**names, AveragedModel=averaged, update_bn=update_bn, __all__=NAMES)
