"""A request's `"update"`: an optimizer step applied in place to resident arrays after its backward.

    "update": {"optimizer": "adam",
               "groups": [{"handles": ["w1", "b1"], "lr": 0.001, "betas": [0.9, 0.999]}]}

The step is the engine's own optimizer (`engine.optim`: SGD, Adam, AdamW, RMSprop) run on the
resident arrays with the request's gradients, its state (momentum buffers, Adam's moments and step
count) kept resident with each array: the formulas are written once, there. A group's options are
the optimizer's constructor arguments (its defaults where left out); a resident without a gradient
in this request is left as it is, as PyTorch skips a parameter whose `.grad` is None."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy
import orjson

from engine.api import array_of, shown, variable_of
from engine.optim import SGD, Adam, AdamW, RMSprop
from wire.errors import RequestError

OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}
FIELD = "update"


CHECKED_OPTIONS = 256  # distinct (optimizer, options) pairs remembered as valid (`_check_options`)
_valid: OrderedDict = OrderedDict()  # (optimizer name, options as sorted JSON) -> None, least recently used first
_valid_lock = threading.Lock()


def check_update(update) -> list:
    """[(optimizer class, options, handles)] of an `update` object, or 422 naming the field at fault."""
    if not isinstance(update, dict) or set(update) - {"optimizer", "groups"}:
        raise RequestError("'update' must be an object with 'optimizer' and 'groups'", field=FIELD)
    name = update.get("optimizer")
    if name not in OPTIMIZERS:
        raise RequestError(
            f"update.optimizer must be one of {', '.join(OPTIMIZERS)} (got {shown(name)})", field=f"{FIELD}.optimizer"
        )
    cls = OPTIMIZERS[name]
    groups = update.get("groups")
    if not isinstance(groups, list) or not groups:
        raise RequestError("update.groups must be a non-empty list of objects", field=f"{FIELD}.groups")
    checked, seen = [], set()
    for i, group in enumerate(groups):
        where = f"{FIELD}.groups[{i}]"
        if not isinstance(group, dict):
            raise RequestError(f"{where} must be an object", field=where)
        handles = group.get("handles")
        if not isinstance(handles, list) or not handles or not all(isinstance(h, str) for h in handles):
            raise RequestError(
                f"{where}.handles must be a non-empty list of resident handles", field=f"{where}.handles"
            )
        twice = seen.intersection(handles) or (len(set(handles)) < len(handles) and handles)
        if twice:
            raise RequestError(f"{where}: handle {shown(sorted(twice)[0])} is updated twice", field=f"{where}.handles")
        seen.update(handles)
        options = {k: v for k, v in group.items() if k != "handles"}
        if "betas" in options and isinstance(options["betas"], list):
            options["betas"] = tuple(options["betas"])
        _check_options(name, cls, options, where)
        checked.append((cls, options, handles))
    return checked


def _check_options(name: str, cls, options: dict, where: str) -> None:
    """The optimizer's own checks of a group's options (a probe parameter: the options are what is
    checked), once per distinct options: a training loop sends the same ones every step."""
    try:
        key = (name, orjson.dumps(options, option=orjson.OPT_SORT_KEYS))
    except TypeError:  # not JSON's (an in-process caller's): checked every time
        key = None
    if key is not None and key in _valid:
        return
    try:
        cls([variable_of(numpy.zeros(1), requires_grad=True)], **options)
    except (TypeError, ValueError, NotImplementedError) as err:
        raise RequestError(f"{where}: {err}", field=where) from None
    if key is not None:
        with _valid_lock:
            _valid[key] = None
            while len(_valid) > CHECKED_OPTIONS:
                _valid.popitem(last=False)


def apply_update(store, key, groups, grads: dict) -> None:
    """Step the resident arrays of session `key`: `groups` from `check_update`, `grads` {handle: gradient
    array}. All or none: the engine's optimizer steps a copy of each array, whose state is charged to the
    session first (413 when it does not fit), and then the copies replace the arrays (a request still
    reading an array keeps the value it read)."""
    for cls, options, handles in groups:
        stepped = [(h, store.get(key, h, FIELD)) for h in handles if grads.get(h) is not None]
        if not stepped:
            continue
        params = []
        for handle, resident in stepped:
            grad = grads[handle]
            if grad.shape != resident.array.shape or grad.dtype != resident.array.dtype:
                raise RequestError(
                    f"resident {shown(handle)}: its gradient is {grad.dtype}{list(grad.shape)} but it holds "
                    f"{resident.array.dtype}{list(resident.array.shape)}; an update keeps shape and dtype",
                    node=handle,
                    field=FIELD,
                )
            param = variable_of(resident.array.copy(), requires_grad=True)  # the step writes it in place
            param.grad = variable_of(grad)
            params.append(param)
        optimizer = cls(params, **options)
        for param, (_, resident) in zip(params, stepped):
            if resident.state:
                optimizer.state[param] = {k: variable_of(v) for k, v in resident.state.items()}
        optimizer.step()
        states = [{k: _kept(array_of(v), grads.values()) for k, v in optimizer.state[p].items()} for p in params]
        growth = sum(
            sum(int(a.nbytes) for a in s.values()) - sum(int(a.nbytes) for a in r.state.values())
            for s, (_, r) in zip(states, stepped)
        )
        store.check_room(key, growth, FIELD)
        for param, state, (_, resident) in zip(params, states, stepped):
            before = resident.nbytes
            resident.array, resident.state = _kept(array_of(param), grads.values()), state
            store.recharge(key, resident, before)


def _kept(array, grads) -> numpy.ndarray:
    """A stepped array or state as a resident keeps it: itself, or a copy where it may share memory with a
    request's gradient (which lives in the request's buffers)."""
    if any(numpy.may_share_memory(array, g) for g in grads):
        return numpy.array(array, copy=True)
    return array
