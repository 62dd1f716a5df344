"""`torch.optim.Optimizer`, written once for every Variable implementation: param_groups with per-group
options, `defaults`, `add_param_group`, per-parameter `state`, `zero_grad`, `state_dict`/`load_state_dict`
(PyTorch's layout: state by parameter index, groups with `params` as indices).

A step is computed out of place and committed at the end (`Step`): every parameter's new value and
every new state tensor is first computed as an expression of the current ones (PyTorch's single-tensor
formulas, in its order of operations), then all of them are realised at once and written, parameters in
place under `no_grad()` (they stay the same objects). On the engine realising costs nothing; on a remote
client it is one `/forward` for the whole step (the side registers how it fetches several values at
once), where an in-place update per parameter would fetch each parameter's value separately. The
hyper-parameters that change from step to step (learning rate, bias corrections) enter the expressions
as 0-d tensors, so the update graph is the same each step and the server reuses its plan.
"""

from __future__ import annotations

import copy
import weakref
from collections import defaultdict, namedtuple
from itertools import chain

import numpy

from engine.user_warnings import warn

_SIDES: dict = {}  # Variable class -> Side
_PENDING: dict = {}  # id -> weakref of a Variable to realise with the next step (realise_with_next_step)


class Side(namedtuple("Side", "grad_mode realise")):
    """What an optimizer needs of a Variable class beyond its methods: its grad mode (`no_grad()` for the
    in-place writes) and `realise(variables)`, which computes several Variables' values at once (None:
    they are computed already)."""


def register(variable_class, grad_mode, realise=None) -> None:
    """Optimizers update `variable_class` parameters, writing them under `grad_mode.no_grad()`."""
    _SIDES[variable_class] = Side(grad_mode, realise)


def side_of(param) -> Side:
    for cls in type(param).__mro__:
        side = _SIDES.get(cls)
        if side is not None:
            return side
    raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(param).__name__}")


def realise_with_next_step(variable) -> None:
    """Compute `variable` with the next optimizer step's values (in its one request) and then forget how it
    was computed: for a buffer a module updates outside autograd on every forward (BatchNorm's running
    statistics), which on a remote client would otherwise stay an expression that grows with every step
    until its value is needed. Nothing to do where values are computed at once (no `realise`)."""
    if side_of(variable).realise is not None:
        _PENDING[id(variable)] = weakref.ref(variable)


def _take_pending() -> list:
    pending = [v for v in (ref() for ref in _PENDING.values()) if v is not None]
    _PENDING.clear()
    return pending


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


class Step:
    """The updates of one optimizer step: new parameter values and new state tensors, written by `commit()`."""

    def __init__(self):
        self.params = []  # (parameter, its new value)
        self.states = []  # (state dict, key, new tensor)

    def param(self, param, value):
        self.params.append((param, value))

    def state(self, state: dict, key: str, value):
        self.states.append((state, key, value))

    def commit(self):
        pending = _take_pending()
        values = [v for _, v in self.params] + [v for _, _, v in self.states] + pending
        by_side = defaultdict(list)
        for v in values:
            by_side[side_of(v).realise].append(v)
        for realise, group in by_side.items():
            if realise is not None and group:
                realise(group)
        for param, value in self.params:
            with side_of(param).grad_mode.no_grad():
                param.copy_(value)
        for state, key, value in self.states:
            state[key] = value.detach()
        for buffer in pending:
            buffer.data = buffer.numpy(force=True)  # its value, without its history


class Optimizer:
    """Base class of the optimizers: `step()` is a subclass's; the rest is PyTorch's bookkeeping."""

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        if _is_variable(params):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, but got "
                + params.type()
            )
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    def __repr__(self):
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    def add_param_group(self, param_group: dict) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if _is_variable(params):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the ordering of tensors in "
                "sets will change between runs. Please use a list instead."
            )
        else:
            param_group["params"] = list(params)
        tensors, names = [], []
        for param in param_group["params"]:
            if isinstance(param, tuple):
                names.append(param[0])
                tensors.append(param[1])
            else:
                tensors.append(param)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names
        for param in tensors:
            if not _is_variable(param):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + type(param).__name__)
            side_of(param)
            if not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        ids = [id(p) for p in tensors]
        if len(ids) != len(set(ids)):
            warn(
                "optimizer contains a parameter group with duplicate parameters; in future, this will cause an error; "
                "see github.com/pytorch/pytorch/issues/40967 for more information"
            )
        existing = {id(p) for group in self.param_groups for p in group["params"]}
        if not existing.isdisjoint(ids):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def register_step_pre_hook(self, hook):
        """`hook(optimizer, args, kwargs)` before each `step`; it may return new `(args, kwargs)`."""
        return _hook_step(self, "pre", hook)

    def register_step_post_hook(self, hook):
        """`hook(optimizer, args, kwargs)` after each `step`."""
        return _hook_step(self, "post", hook)

    def step(self, closure=None):
        """One update of every parameter that has a gradient (`_step`, by default `_update` for each),
        committed together (`Step`); returns the closure's loss, which is computed with grad mode on."""
        loss = self._closure_loss(closure)
        update = Step()
        with self._updating():
            self._step(update)
        update.commit()
        return loss

    def _step(self, update):
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(update, group, param)

    def _update(self, update, group, param):
        raise NotImplementedError(f"{type(self).__name__} does not define step()")

    def _closure_loss(self, closure):
        if closure is None:
            return None
        with self._grad_mode().enable_grad():
            return closure()

    def _grad_mode(self):
        return side_of(self.param_groups[0]["params"][0]).grad_mode

    def _updating(self):
        """The context a step computes in: `no_grad()`, as PyTorch's optimizers step."""
        return self._grad_mode().no_grad()

    # --- state_dict ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """{"state": {index: {name: value}}, "param_groups": [{options..., "params": [indices]}]}."""
        mapping = {}
        start = 0

        def pack(group):
            nonlocal start
            packed = {k: v for k, v in group.items() if k != "params"}
            mapping.update({id(p): i for i, p in enumerate(group["params"], start) if id(p) not in mapping})
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            start += len(packed["params"])
            return packed

        groups = [pack(g) for g in self.param_groups]
        state = {(mapping[id(k)] if _is_variable(k) else k): v for k, v in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Options and state from `state_dict` (per-parameter state matched by position and cast to the
        parameter's dtype and package, `step` kept as it is)."""
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
            )
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups), chain.from_iterable(g["params"] for g in groups)
            )
        )
        state: defaultdict = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = {key: _cast(param, key, value) for key, value in v.items()}
            else:
                state[k] = v
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            new_groups.append(saved)
        self.state, self.param_groups = state, new_groups


def _is_variable(value) -> bool:
    return any(cls in _SIDES for cls in type(value).__mro__)


def _cast(param, key, value):
    """A state value for `param`: a tensor (of any package, or an array) becomes one of param's package,
    in param's dtype when floating (`step` keeps its own dtype), as a copy."""
    if isinstance(value, dict):
        return {k: _cast(param, k, v) for k, v in value.items()}
    if isinstance(value, list):  # (LBFGS's history)
        return [_cast(param, key, v) for v in value]
    if not (_is_variable(value) or hasattr(value, "__array__")) or isinstance(value, (int, float)):
        return value
    array = numpy.array(value)
    if key != "step" and param.dtype.kind == "f":
        return param.new_tensor(array, dtype=param.dtype)
    return param.new_tensor(array, dtype=array.dtype)


def lerp(start, end, weight: float):
    """start + weight * (end - start), in PyTorch's two-branch form (bit for bit its CPU kernel)."""
    if abs(weight) < 0.5:
        return start + (end - start) * weight
    return end - (end - start) * (1 - weight)


def scalar(param, value):
    """A 0-d tensor of `value` in param's dtype and class: a hyper-parameter that changes between
    steps, sent as an input rather than baked into the update graph."""
    return param.new_tensor(value, dtype=param.dtype)


def _hook_step(optimizer, when, hook):
    """PyTorch's step hooks: `type(optimizer).step` runs them (patched when a first hook is registered, as PyTorch
    patches it), once per outermost step; the handle removes the hook."""
    from engine.surface import RemovableHandle

    hooks = optimizer.__dict__.setdefault("_step_hooks", {"pre": {}, "post": {}})[when]
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    step = type(optimizer).step
    if not getattr(step, "hooked", False):

        def hooked(*args, **kwargs):  # (args: the optimizer and step's arguments, as PyTorch's hooks get them)
            self, hooks = args[0], args[0].__dict__.get("_step_hooks")
            if hooks is None or self.__dict__.get("_in_step"):
                return step(*args, **kwargs)
            for pre in list(hooks["pre"].values()):
                changed = pre(self, args, kwargs)
                if changed is not None:
                    if not (isinstance(changed, tuple) and len(changed) == 2):
                        raise RuntimeError(
                            f"{step} must return None or a tuple of (new_args, new_kwargs), but got {changed}."
                        )
                    args, kwargs = changed
            self._in_step = True
            try:
                out = step(*args, **kwargs)
            finally:
                self._in_step = False
            for post in list(hooks["post"].values()):
                post(self, args, kwargs)
            return out

        hooked.hooked, hooked.__doc__ = True, step.__doc__
        type(optimizer).step = hooked
    return handle


_KNOWN: dict = {}  # id(a tensor step_tensor made) -> (a weak reference to it, its version then, its value)


def step_tensor(param, value: float, like=None):
    """The `step` count of a parameter's state (and its other state scalars), a float32 0-d tensor as PyTorch
    keeps it (of `like`'s dtype when given: a loaded one is in the parameter's), its value remembered for
    `state_value`."""
    dtype = numpy.dtype(numpy.float32 if like is None else like.dtype)
    tensor = param.new_tensor(float(value), dtype=dtype)
    key = id(tensor)
    _KNOWN[key] = (weakref.ref(tensor, lambda _: _KNOWN.pop(key, None)), tensor._version, float(dtype.type(value)))
    return tensor


def state_value(tensor) -> float:
    """`tensor.item()` of a state scalar, not read back when `step_tensor` made it and it is unchanged: PyTorch keeps
    `step` on the host beside a CUDA parameter, here it is on the parameter's device, where a read waits for the
    device's queue to drain (every parameter, every step). A loaded or changed one is read."""
    known = _KNOWN.get(id(tensor))
    if known is not None and known[0]() is tensor and known[1] == tensor._version:
        return known[2]
    return tensor.item()
