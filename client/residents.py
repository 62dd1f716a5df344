"""Parameters kept resident on the server (`wire.residents`): a remote training step sends only its batch.

A client optimizer (`client.optim`) on a remote session registers its parameters here. From then on:

* a request whose graph reads a registered parameter names it by handle (`"resident"` on its input
  node) instead of sending its array; the first such request uploads it (again after `p.data = ...` or
  reading `p.data`, which may be written in place);
* `loss.backward()` whose every gradient goes to registered parameters is *deferred*: their `.grad` is
  a placeholder, and `optimizer.step()` sends that backward with the update, so the server computes
  the gradients and steps the parameters in place, and neither parameters nor gradients travel. Any
  other request (reading a value, reading a `.grad`, another backward) sends the deferred backward
  first, as it would have been sent;
* a large input that is not a parameter (the batch), read again from the same Variable at the same
  graph node, is held there too (`Held`): read by handle while its bytes equal the server's copy
  (inline again, from then on, if the session's byte bound has no room for it: `Residents.inline`);
* after a step a parameter's value is on the server only: `p.data`, `p.item()`, `print(p)` fetch it
  (one /forward). A gradient the step consumed on the server is not sent back: reading it after
  `step()` raises (read it before, or use `resident=False`).

If the server lost the session's arrays (their TTL passed, or it restarted), the next request fails
with `ResidentLost`: the values the server held are gone, so the parameters must be set again
(e.g. `model.load_state_dict(saved)`, or `p.data = ...`), which uploads them.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy

from client.errors import NotFoundError
from client.graph import CUT, LEAF, Value
from client.transports import Call

_HANDLES = itertools.count()
MIN_HELD_BYTES = 16384  # a smaller input is sent with each request (holding it would save little)
WATCHED: dict = {}  # id of a registered parameter -> the Residents (sessions) holding it, weakly


def touched(param) -> None:
    """`param`'s value may change on the client (`p.data` read or set): every session holding it resident
    uploads it again with the next request that reads it."""
    holders = WATCHED.get(id(param))
    if holders:
        for residents in list(holders):
            residents.dirty(param)


class ResidentLost(NotFoundError):  # type: ignore[valid-type,misc]  # (a class made by client.errors._answer)
    """The server no longer holds a session's resident arrays: their values must be set again."""


class Resident:
    """A registered parameter: its handle, and whether the server holds its current value."""

    __slots__ = ("handle", "param", "synced")

    def __init__(self, param):
        self.handle = f"p{next(_HANDLES)}"
        self.param = weakref.ref(param)
        self.synced = False


class Held:
    """An input that is not a parameter (a batch) held on the server: read by handle while its array equals
    `copy` (what the server holds) bit for bit, whatever changed it (an op, `.data`, the NumPy array behind
    it). A graph input node holds one once a request reads the same Variable there twice in a row (a loop
    that makes a new batch Variable each step sends it inline, as before)."""

    __slots__ = ("handle", "leaf", "copy", "synced")

    def __init__(self, leaf):
        self.handle, self.leaf, self.copy, self.synced = None, weakref.ref(leaf), None, False


class Pending:
    """A deferred backward: its call, the values it answers and the placeholder gradients it fills."""

    __slots__ = ("call", "builder", "output_values", "names", "wanted", "grads")

    def __init__(self, call, builder, output_values, names, wanted, grads):
        self.call, self.builder, self.output_values, self.names = call, builder, output_values, names
        self.wanted, self.grads = wanted, grads


class Residents:
    """One session's registered parameters (by id of the Variable), and its deferred backward."""

    def __init__(self):
        self.params: dict[int, Resident] = {}
        self.pending: Pending | None = None
        self.held: dict[str, Held] = {}  # graph input node id -> the input held for it
        self.holding = True  # False once the server's byte bound refused a held input (`inline`)
        self.consumed: weakref.WeakSet = weakref.WeakSet()  # placeholder gradients a step used on the server
        self.steps, self.last_step = itertools.count(1), None  # numbers of the steps left in flight; the last's

    def register(self, param) -> Resident:
        entry = self.params.get(id(param))
        if entry is None or entry.param() is not param:
            entry = self.params[id(param)] = Resident(param)
            WATCHED.setdefault(id(param), weakref.WeakSet()).add(self)
            weakref.finalize(param, _forget, id(param), weakref.ref(self))
        return entry

    def of(self, param) -> Resident | None:
        entry = self.params.get(id(param))
        return entry if entry is not None and entry.param() is param else None

    def prepare(self, session, call: Call, builder) -> list:
        """Rewrite `call` (built by `builder`) so that registered parameters are read by handle,
        uploading those the server does not hold; the entries it uploads (to mark synced once sent).
        A value recorded before a step read a parameter's earlier value: that is sent as it is (the
        server holds the current one only)."""
        uploaded: list[Resident] = []
        if not self.params:
            return uploaded
        by_node: dict[str, Resident] = {}
        for key, node_ids in builder.leaf_ids.items():
            found = self.params.get(key)
            param = None if found is None else found.param()
            if found is None or param is None:
                continue
            current = None if param._value is None else builder.ids.get(id(param._value))
            if current is not None and current in node_ids:
                by_node[current] = found
        missing = [name for name, array in call.inputs if array is None and name not in by_node]
        if missing:
            raise RuntimeError(
                "a value recorded before optimizer.step() reads a parameter's earlier value, which the server "
                "no longer holds (it keeps the current one): read such values before step()"
            )
        by_node.update(self._holding(call, builder, by_node, uploaded))
        if not by_node:
            return uploaded
        for node in call.header["graph"]["nodes"]:
            entry = by_node.get(node["id"])
            if entry is not None:
                node["resident"] = entry.handle
        call.inputs = [(name, array) for name, array in call.inputs if name not in by_node]
        call.header["session"] = session.session_id
        for entry in dict.fromkeys(e for e in by_node.values() if isinstance(e, Resident)):
            param = entry.param()
            array = None if entry.synced or param is None else _current(param)
            if array is not None:
                call.upload.append((entry.handle, array))
                uploaded.append(entry)
        return uploaded

    def _holding(self, call, builder, taken, uploaded) -> dict:
        """{node id: Held} of the call's large inputs (not parameters: not in `taken`) read by handle (`Held`),
        those that changed or are held from now on uploaded with the call (and in `uploaded`)."""
        arrays, found = dict(call.inputs), {}
        for value in builder._keep if self.holding else ():
            node = builder.ids[id(value)]
            array = arrays.get(node)
            if array is None or value.leaf is None or node in taken or builder.rg[node]:
                continue
            if array.nbytes < MIN_HELD_BYTES:
                continue
            held = self.held.get(node)
            if held is None or held.copy is None and held.leaf() is not value.leaf:
                self.held[node] = Held(value.leaf)
            elif held.synced and _same(held.copy, array):
                found[node] = held
            elif held.leaf() is value.leaf and array.flags.c_contiguous:  # read here again, changed: uploaded
                if held.copy is None or held.copy.shape != array.shape or held.copy.dtype != array.dtype:
                    if held.handle is not None:  # (the server keeps a handle's shape and dtype)
                        call.header.setdefault("free", []).append(held.handle)
                    held.handle = f"x{next(_HANDLES)}"
                held.copy, held.synced = array.copy(), False
                call.upload.append((held.handle, held.copy))
                found[node] = held
                uploaded.append(held)
            else:
                held.leaf = weakref.ref(value.leaf)
        return found

    def inline(self, call, uploaded: list) -> bool:
        """After the server refused `call` for a resident byte bound (413: it has room for the parameters, not
        the batch too; nothing was applied), its held inputs go inline again (those it holds are freed) and
        the session holds no input from now on; False when the call uploads no held input (nothing changes)."""
        if not any(isinstance(entry, Held) for entry in uploaded):
            return False
        handles = {held.handle: held for held in self.held.values() if held.handle is not None}
        for node in call.header["graph"]["nodes"]:
            if node.get("resident") in handles:
                call.inputs.append((node["id"], handles[node.pop("resident")].copy))
        call.upload = [(handle, array) for handle, array in call.upload if handle not in handles]
        call.header["free"] = list(dict.fromkeys([*call.header.get("free", ()), *handles]))
        uploaded[:] = [entry for entry in uploaded if not isinstance(entry, Held)]
        self.held, self.holding = {}, False
        return True

    def on_server_only(self, asked: dict) -> list:
        """The current Values of the parameters whose value is on the server only, when `asked` (values by
        id) reads one of them (or a detached copy): reading a model's parameters after a step fetches them
        together."""
        values = []
        for entry in self.params.values():
            param = entry.param()
            if param is not None and param._data is None and param._value.kind == LEAF and param._value.array is None:
                values.append(param._value)
        ids = {id(v) for v in values}
        reads = any(id(cut_source(v)) in ids for v in asked.values())
        return values if reads else []

    def deferrable(self, wanted) -> bool:
        return bool(wanted) and all(self.of(holder) is not None for _, holder in wanted)

    def sent(self, uploaded) -> None:
        for entry in uploaded:
            entry.synced = True

    def stale(self, params) -> None:
        """`params` were stepped on the server: their values are fetched when read."""
        for param in params:
            self.register(param).synced = True
            dtype = (param._data if param._data is not None else param._value).dtype
            value = Value(LEAF, param.shape, dtype, requires_grad=True, leaf=param)
            param._data, param._value, param._shared = None, value, False

    def dirty(self, param) -> None:
        """`param`'s value may have changed on the client: upload it with the next request that reads it."""
        entry = self.of(param)
        if entry is not None:
            entry.synced = False


def _forget(key: int, residents_ref) -> None:
    residents = residents_ref()
    if residents is not None:
        residents.params.pop(key, None)
    holders = WATCHED.get(key)
    if holders is not None and residents is not None:
        holders.discard(residents)
    if not holders:
        WATCHED.pop(key, None)


def cut_source(value):
    """The value a detached value (a chain of cuts) stands for: itself when it is not a cut."""
    while value.kind == CUT and value.inputs and value.array is None:
        value = value.inputs[0]
    return value


def placeholder(shape, dtype) -> Value:
    """The Value of a deferred gradient: computed when the deferred backward is sent."""
    return Value(CUT, shape, dtype)


def _same(copy, array) -> bool:
    """Whether `array` holds the bytes of `copy` (bit for bit: -0.0 is not 0.0, and a NaN is itself)."""
    if copy.shape != array.shape or copy.dtype != array.dtype or not array.flags.c_contiguous:
        return False
    return numpy.array_equal(copy.reshape(-1).view(numpy.uint8), array.reshape(-1).view(numpy.uint8))


def _current(param):
    """The array of a registered parameter's current value on the client (None: on the server only)."""
    return param._data if param._data is not None else param._value.array  # None: only the server has it


def residents_of(session) -> Residents:
    found = getattr(session, "_residents", None)
    if found is None:
        found = session._residents = Residents()
    return found


def lost(err: Any) -> ResidentLost:
    """The error of a request the server answered 404 about a resident array."""
    return ResidentLost(
        f"{err.message}. The server no longer holds this session's resident parameters (unused past its "
        "resident_ttl_s, or it restarted): their last values are lost with it; set them again "
        "(model.load_state_dict(...) or p.data = ...), which uploads them, and step again",
        err.status,
        err.node,
        err.field,
        err.url,
    )
