"""The client's optimizers on a remote session: parameters kept resident on the server (`client.residents`).

`Resident` is mixed into each engine optimizer (`client.optim.SGD`, ...). Made on a remote `Session`
with `resident=True` (opt-in: without it the step keeps PyTorch's semantics exactly, gradients
readable after `step()`), it registers its parameters with the session; `step()` then sends
the update to the server, which applies the engine's own optimizer there (`wire.resident_update`):
with the deferred backward when the gradients are still on the server (one request, only the batch
goes up), else with the gradients the client holds (accumulated over several backwards, or set by
hand). Embedded, or without `resident=True`, the engine's step runs as it is."""

from __future__ import annotations

import inspect

import numpy

from client.autograd import flush
from client.residents import residents_of
from client.session import PIPELINE_DEPTH, Session
from client.state import current_session
from client.variable import Variable
from engine.optim import SGD, Adam, AdamW, Optimizer, RMSprop
from engine.optim.optimizer import _take_pending

WIRE_NAMES = ((AdamW, "adamw"), (Adam, "adam"), (SGD, "sgd"), (RMSprop, "rmsprop"))  # subclasses first
NOT_OPTIONS = {"self", "params", "foreach", "differentiable", "fused", "capturable"}


class Resident(Optimizer):
    """Mixed into an engine optimizer: parameters resident on a remote session's server."""

    _session = None  # the remote Session holding the parameters (None: the engine's step, on the client)
    _state_on_server = False  # optimizer.state is the server's, fetched when read

    def __init__(self, params, *args, resident: bool = False, **kwargs):
        super().__init__(params, *args, **kwargs)
        session = current_session()
        self._session = session if resident and isinstance(session, Session) and not session.embedded else None
        for group in self.param_groups:
            self._register(group)

    def _register(self, group) -> None:
        if self._session is not None:
            residents = residents_of(self._session)
            for param in group["params"]:
                residents.register(param)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        self._register(self.param_groups[-1])

    @property
    def state(self):
        """Per-parameter state; after a step on the server, fetched from there when read (one request)."""
        if self._state_on_server and self._session is not None and not self._session.closed:
            self._state_on_server = False
            self._session._run(_fetching_state(self, self._session))
        return self._state

    @state.setter
    def state(self, value):
        self._state = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The engine's zero_grad; a gradient a step consumed on the server becomes None or zeros."""
        if self._session is not None and not set_to_none:
            self._session._settle()  # (which gradients the step in flight consumed)
        if self._session is not None:
            residents = residents_of(self._session)
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None and p.grad._data is None and p.grad._value in residents.consumed:
                        p.grad = None if set_to_none else Variable._leaf(numpy.zeros(p.shape, p.grad._value.dtype))
        super().zero_grad(set_to_none)

    def load_state_dict(self, state_dict: dict) -> None:
        """The engine's load_state_dict; the state is uploaded to the server with the parameters it needs."""
        super().load_state_dict(state_dict)
        if self._session is not None and not self._session.closed:
            self._session._run(_uploading_state(self, self._session))

    def step(self, closure=None):
        session = self._session
        if session is None or session.closed:
            return super().step(closure)
        loss = self._closure_loss(closure)
        session._run(_stepping(self, session))
        self._state_on_server = True
        return loss


def wire_name(optimizer) -> str:
    return next(name for cls, name in WIRE_NAMES if isinstance(optimizer, cls))


_ACCEPTED: dict = {}  # optimizer class -> the option names its server-side optimizer takes


def _accepted(optimizer_class) -> frozenset:
    """The options the server's optimizer of `optimizer_class` takes: its engine class's constructor arguments."""
    found = _ACCEPTED.get(optimizer_class)
    if found is None:
        engine_class = next(c for c in optimizer_class.__mro__ if c in (SGD, Adam, AdamW, RMSprop))
        found = _ACCEPTED[optimizer_class] = (
            frozenset(inspect.signature(engine_class.__init__).parameters) - NOT_OPTIONS
        )
    return found


def _options(optimizer, group) -> dict:
    """A param group's options as the server's optimizer takes them (its constructor's arguments)."""
    accepted = _accepted(type(optimizer))
    options = {k: v for k, v in group.items() if k in accepted}
    if "betas" in options:
        options["betas"] = [float(b) for b in options["betas"]]
    return options


def _stepping(optimizer, session):
    """The step as session steps: the deferred backward with the update, or the update with the client's
    gradients (`_explicit`); the stepped parameters' values are then on the server only. The deferred one is
    left in flight, numbered to follow the step in flight before it (`"after"`), which the server checks."""
    yield ("settle", PIPELINE_DEPTH - 1)  # (the errors of steps answered are raised before this one changes anything)
    residents = residents_of(session)
    stepped, groups = [], []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if params:
            handles = [residents.register(p).handle for p in params]
            groups.append({"handles": handles, **_options(optimizer, group)})
            stepped.extend(params)
    riders = _take_pending()  # buffers a module updates on each forward (BatchNorm's): with this request
    if not stepped:
        yield from _realising(session, riders)
        return
    update = {"optimizer": wire_name(optimizer), "groups": groups}
    pending = residents.pending
    deferred = pending is not None and all(
        p in pending.grads and p.grad._value is pending.grads[p] and p.grad._data is None for p in stepped
    )
    if deferred and not riders:
        uploaded = residents.prepare(session, pending.call, pending.builder)
        if uploaded:  # (the first step's upload is answered first: a failed one leaves the values here)
            yield from flush(session, update, (), uploaded)
            residents.stale(stepped)
            return
        residents.stale(stepped)  # the values are the server's from now on: its request is left in flight
        update["step"] = step = next(residents.steps)
        if session._in_flight:
            update["after"] = residents.last_step
        residents.last_step = step
        yield ("in_flight",)
        yield from flush(session, update, (), uploaded)
        return
    if deferred:
        yield from flush(session, update, riders)
        yield from _realising(session, riders)
    else:
        yield from flush(session)
        yield from _realising(session, riders)
        yield from _explicit(session, residents, stepped, update)
    residents.stale(stepped)


def _realising(session, buffers):
    """Compute `buffers` (one request at most) and forget how they were computed, as Step.commit does."""
    from client.autograd import fetching

    yield from fetching(session, [b._value for b in buffers if not b._has_value])
    for buffer in buffers:
        buffer.data = buffer._array()


def _explicit(session, residents, params, update):
    """The update with the gradients the client holds: the backward of sum(w * g) over the parameters
    w, whose gradient is exactly g (the product's backward multiplies g by 1)."""
    from client.autograd import _sending  # (one request, its parameters by handle)
    from client.transports import Call

    nodes, inputs, upload, total = [], [], [], None
    for i, param in enumerate(params):
        entry = residents.register(param)
        w, g, m, s = f"w{i}", f"g{i}", f"m{i}", f"s{i}"
        nodes += [
            {"id": w, "op": "input", "requires_grad": True, "resident": entry.handle},
            {"id": g, "op": "input"},
            {"id": m, "op": "mul", "inputs": [w, g]},
            {"id": s, "op": "sum", "inputs": [m]},
        ]
        inputs.append((g, param.grad._array()))
        if not entry.synced:
            upload.append((entry.handle, param._array()))
        if total is not None:
            nodes.append({"id": f"t{i}", "op": "add", "inputs": [total, s]})
            s = f"t{i}"
        total = s
    header = {
        "graph": {"version": "1.1", "nodes": nodes, "outputs": [total]},
        "wrt": [f"w{i}" for i in range(len(params))],
        "session": session.session_id,
        "update": update,
    }
    uploaded = [residents.of(p) for p in params if not residents.of(p).synced]
    yield from _sending(session, Call("/backward", header, inputs, upload=upload), None, (), uploaded)


def _registered(optimizer, residents) -> list:
    return [(p, residents.register(p)) for group in optimizer.param_groups for p in group["params"]]


def _fetching_state(optimizer, session):
    """optimizer.state from the server: each parameter's optimizer state arrays, as Variables."""
    from client.autograd import _sending
    from client.transports import Call

    residents = residents_of(session)
    yield from flush(session)
    params = [(p, e) for p, e in _registered(optimizer, residents) if e.synced]
    if not params:
        return
    header = {"session": session.session_id, "fetch": [f"{e.handle}:*" for _, e in params]}
    reply = yield from _sending(session, Call("/forward", header), None, (), [])
    for param, entry in params:
        prefix = entry.handle + ":"
        state = {n[len(prefix) :]: Variable._leaf(a) for n, a in reply.fetched.items() if n.startswith(prefix)}
        if state:
            optimizer._state[param] = state


def _uploading_state(optimizer, session):
    """Upload optimizer.state (just loaded) with the parameters the server does not hold yet."""
    from client.autograd import _sending
    from client.transports import Call

    residents = residents_of(session)
    yield from flush(session)
    upload, uploaded = [], []
    for param, entry in _registered(optimizer, residents):
        if not entry.synced:
            upload.append((entry.handle, param._array()))
            uploaded.append(entry)
        for name, value in optimizer.state.get(param, {}).items():
            upload.append((f"{entry.handle}:{name}", value._array()))
    if upload:
        header = {"session": session.session_id}
        yield from _sending(session, Call("/forward", header, upload=upload), None, (), uploaded)
