"""A request's `"update"`: an optimizer step applied in place to resident arrays after its backward.

    "update": {"optimizer": "adam",
               "groups": [{"handles": ["w1", "b1"], "lr": 0.001, "betas": [0.9, 0.999]}],
               "step": 8, "after": 7}

The step is the engine's own optimizer (`engine.optim`: SGD, Adam, AdamW, RMSprop) run on the
resident arrays with the request's gradients, its state (momentum buffers, Adam's moments and step
count) kept resident with each array: the formulas are written once, there. A group's options are
the optimizer's constructor arguments (its defaults where left out); a resident without a gradient
in this request is left as it is, as PyTorch skips a parameter whose `.grad` is None. SGD steps the arrays
in place (`engine.optim.sgd_in_place`, the same formulas on arrays) where no request still reads them;
the others step copies that replace the arrays.

`"step"` numbers the update (the session remembers the last it applied) and `"after"` makes it follow
another: it is refused (409, field update.after) unless step `after` is the last the session applied, both when
the request reads its resident inputs and when it steps them. A client that sends a step before the answer
to the one before it (`client.session`) so never has a step applied after one that failed, nor on values
read before its predecessor was applied."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict

import numpy
import orjson

from engine import backend
from engine.api import array_of, shown, variable_of
from engine.optim import SGD, Adam, AdamW, RMSprop, sgd_in_place
from wire.errors import RequestError

OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}
FIELD = "update"


CHECKED_OPTIONS = 256  # distinct (optimizer, options) pairs remembered as valid (`_check_options`)
_valid: OrderedDict = OrderedDict()  # (optimizer name, options as sorted JSON) -> its group, least recently used first
_valid_lock = threading.Lock()


def check_update(update) -> list:
    """[(optimizer class, options, handles)] of an `update` object, or 422 naming the field at fault."""
    if not isinstance(update, dict) or set(update) - {"optimizer", "groups", "step", "after"}:
        raise RequestError(
            "'update' must be an object with 'optimizer' and 'groups' (and 'step', 'after')", field=FIELD
        )
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
        group = _check_options(name, cls, options, where)
        checked.append((cls, group if cls is SGD else options, handles))  # (SGD's: its defaults filled in)
    return checked


def check_order(update: dict) -> tuple:
    """(step, after) of a checked update: each a non-negative integer or None (422 naming it otherwise)."""
    order = update.get("step"), update.get("after")
    for name, value in zip(("step", "after"), order):
        if value is not None and (type(value) is not int or value < 0):
            raise RequestError(
                f"update.{name} must be a non-negative integer (got {shown(value)})", field=f"{FIELD}.{name}"
            )
    return order


def _check_options(name: str, cls, options: dict, where: str) -> dict:
    """The optimizer's own checks of a group's options (a probe parameter: the options are what is
    checked), once per distinct options (a training loop sends the same ones every step); the group
    the probe made of them (its defaults filled in, no "params")."""
    try:
        key = (name, orjson.dumps(options, option=orjson.OPT_SORT_KEYS))
    except TypeError:  # not JSON's (an in-process caller's): checked every time
        key = None
    group = None if key is None else _valid.get(key)
    if group is not None:
        return group
    try:
        probe = cls([variable_of(numpy.zeros(1), requires_grad=True)], **options)
    except (TypeError, ValueError, NotImplementedError) as err:
        raise RequestError(f"{where}: {err}", field=where) from None
    group = {k: v for k, v in probe.param_groups[0].items() if k != "params"}
    if key is not None:
        with _valid_lock:
            _valid[key] = group
            while len(_valid) > CHECKED_OPTIONS:
                _valid.popitem(last=False)
    return group


def apply_update(store, key, groups, grads: dict, order=(None, None)) -> None:
    """Step the resident arrays of session `key`: `groups` from `check_update`, `grads` {handle: gradient
    array}, `order` (step, after) from `check_order`. All or none (a step not after `after`: 409): every gradient is checked, and the state the step adds is charged to the session
    (413 when it does not fit), before any array changes (SGD's momentum buffers first; the other
    optimizers' on their stepped copies). One update of a session
    at a time (`store.updating`): SGD steps an array in place where nothing else reads it (no request's
    view: `_alone`), else a copy that then replaces it, as the other optimizers do (a request still
    reading an array keeps the value it read)."""
    grads = {h: backend.to_numpy(g) for h, g in grads.items()}  # (residents live on the host: a GPU's gradients too)
    with store.updating(key):
        steps = [(cls, options, _stepped(store, key, handles, grads)) for cls, options, handles in groups]
        store.check_after(key, order[1])
        growth = sum(_growth(cls, options, stepped) for cls, options, stepped in steps)
        store.check_room(key, growth, FIELD)
        for cls, options, stepped in steps:
            befores = [resident.nbytes for _, resident in stepped]
            if cls is SGD:
                for handle, resident in stepped:
                    array = resident.array if _alone(resident.array) else resident.array.copy()
                    sgd_in_place(array, grads[handle], resident.state, options)
                    resident.array = array
            else:
                _step_copies(store, key, cls, options, stepped, grads)
            for (_, resident), before in zip(stepped, befores):
                store.recharge(key, resident, before)
        store.applied(key, order[0])


def _stepped(store, key, handles, grads) -> list:
    """[(handle, Resident)] of a group's handles that have a gradient, each checked against its array."""
    stepped = [(h, store.get(key, h, FIELD)) for h in handles if grads.get(h) is not None]
    for handle, resident in stepped:
        grad = grads[handle]
        if grad.shape != resident.array.shape or grad.dtype != resident.array.dtype:
            raise RequestError(
                f"resident {shown(handle)}: its gradient is {grad.dtype}{list(grad.shape)} but it holds "
                f"{resident.array.dtype}{list(resident.array.shape)}; an update keeps shape and dtype",
                node=handle,
                field=FIELD,
            )
    return stepped


def _growth(cls, options, stepped) -> int:
    """The bytes SGD's step adds to its residents' state: a momentum buffer where there is none yet (the
    other optimizers' growth is checked on their stepped copies, `_step_copies`)."""
    if cls is not SGD or not options["momentum"]:
        return 0
    return sum(int(r.array.nbytes) for _, r in stepped if "momentum_buffer" not in r.state)


def _alone(array) -> bool:
    """Whether nothing but its Resident holds `array` (no view of it, no request reading it: a view holds its
    base), so it may be written in place. (Three references: the Resident's slot, this call's argument and
    getrefcount's.)"""
    return array.base is None and sys.getrefcount(array) <= 3


def _step_copies(store, key, cls, options, stepped, grads) -> None:
    """The engine's optimizer `cls` steps copies of the arrays, which then replace them once the state they
    hold is charged (413 when it does not fit: nothing changes)."""
    params, device, host = [], backend.to_active, backend.to_numpy  # (the step on the engine's device)
    for handle, resident in stepped:
        param = variable_of(device(resident.array.copy()), requires_grad=True)  # the step writes it in place
        param.grad = variable_of(device(grads[handle]))
        params.append(param)
    optimizer = cls(params, **options)
    for param, (_, resident) in zip(params, stepped):
        if resident.state:
            optimizer.state[param] = {k: variable_of(device(v)) for k, v in resident.state.items()}
    optimizer.step()
    states = [{k: _kept(host(array_of(v)), grads.values()) for k, v in optimizer.state[p].items()} for p in params]
    growth = sum(
        sum(int(a.nbytes) for a in s.values()) - sum(int(a.nbytes) for a in r.state.values())
        for s, (_, r) in zip(states, stepped)
    )
    store.check_room(key, growth, FIELD)
    for param, state, (_, resident) in zip(params, states, stepped):
        resident.array, resident.state = _kept(host(array_of(param)), grads.values()), state


def _kept(array, grads) -> numpy.ndarray:
    """A stepped array or state as a resident keeps it: itself, or a copy where it may share memory with a
    request's gradient (which lives in the request's buffers)."""
    if any(numpy.may_share_memory(array, g) for g in grads):
        return numpy.array(array, copy=True)
    return array
