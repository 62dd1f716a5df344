"""Repeat binary requests, decoded by their header's bytes (issue 24 item 4). A client that repeats a
request (a training loop, a benchmark) sends the same JSON header each time: a `Layout` is what
`wire.messages.decode_request` made of one (the request's fields, each tensor's place in the tail)
and, once a request of it ran on a cached plan, how it was admitted. A body with a header seen before
is decoded by slicing its tail and admitted as that request was: it passed the same checks under the
same limits. Only what passed them is kept, so a refusal is always the full decode's or admission's own.
A resident step's header, whose update's "step" and "after" change each time, is kept without them (`_unnumbered`)."""

from __future__ import annotations

import re
import threading
import weakref

import numpy
import orjson

from engine import backend
from wire.codec import DATATYPES
from wire.graph import ProgramKey
from wire.infer import known_shapes
from wire.messages import Request, encode_result_parts

MAX_HEADER = 8192  # bytes of a header kept as a layout's key (larger ones are decoded in full)
LAYOUTS = 64  # layouts kept, the oldest dropped first: at most 512 KiB of keys
ORDER = re.compile(rb'"step":(0|[1-9][0-9]{0,17}),"after":(0|[1-9][0-9]{0,17})}')  # an update's numbers, last


WIRE_DTYPES = frozenset(DATATYPES.values())  # an array of one of these is sent as its own bytes


class Layout:
    """A header's `fields`, `tensors` [(whose, name, dtype, count, offset, shape)], `size`, `admitted`
    and `answered`: what its last binary answer's header says (plan, names, (shape, dtype)s) and its bytes."""

    __slots__ = ("admitted", "answered", "fields", "header", "keys", "size", "tensors")

    def __init__(self, fields: dict, tensors: list, size: int, header: dict | None = None):
        self.fields, self.tensors, self.size, self.admitted, self.answered = fields, tensors, size, {}, None
        self.header = header  # an in-process request's (`repeat`)
        self.keys = {}  # {kind: the ProgramKey its requests run by, or None: not by `wire.handler.repeat`}

    def request(self, inputs: dict, grad_outputs: dict, **more) -> Request:
        """A Request of this layout with these tensors (`more`: further fields), made as the one it was learned from."""
        request = Request.__new__(Request)
        request.__dict__.update(self.fields, inputs=inputs, grad_outputs=grad_outputs, upload={}, layout=self, **more)
        return request

    def views(self, body, header_length: int, aligned: bool = True) -> tuple[dict, dict]:
        """(inputs, grad_outputs) viewing a body's tail (`aligned`: one not aligned for its dtype copied)."""
        inputs, grad_outputs = {}, {}
        for whose, name, dtype, count, offset, shape in self.tensors:
            array = numpy.frombuffer(body, dtype, count, header_length + offset)
            if len(shape) != 1:  # (frombuffer's is one-dimensional)
                array = array.reshape(shape)
            if aligned and dtype.alignment > 1 and not array.flags.aligned:
                array = array.copy()
            (inputs if whose == "inputs" else grad_outputs)[name] = array
        return inputs, grad_outputs

    def key(self, kind: str):
        """The ProgramKey (`wire.compile`) a request of it to `kind` runs by, when a program and its tensors' bytes
        are all its answer needs; None when more is (a tape, resident arrays, anomaly checks, a JSON answer)."""
        if kind not in self.keys:
            fields = self.fields
            more = ("tape", "retain_graph", "detect_anomaly", "session", "held", "update", "fetch", "free")
            seeded = frozenset(name for whose, name, *_ in self.tensors if whose == "grad_outputs")
            wrt = None if fields["wrt"] is None else tuple(fields["wrt"])
            plain = fields["binary_output"] and not any(fields[name] for name in more)
            self.keys[kind] = ProgramKey(kind == "backward", wrt, seeded) if plain else None
        return self.keys[kind]

    def encode(self, result) -> tuple[list, int]:
        """([header, *buffers], header length) of the binary answer to a request of this layout: when
        its header says what the last one's said (the same plan, and tensors of the same names,
        shapes and dtypes, each contiguous), that header's bytes again and the arrays' own bytes,
        no JSON written; else `encode_result_parts`, whose header is kept for the next one."""
        if result.tape is not None or result.fetched:
            return encode_result_parts(result, True)
        answered, grads = self.answered, result.grads
        if answered is not None and (parts := _repeated(answered, result.plan, result.outputs, grads)) is not None:
            return parts, len(parts[0])
        said = tuple([(a.shape, a.dtype) for a in (*result.outputs.values(), *(grads or {}).values())])
        names = (result.plan, tuple(result.outputs), None if grads is None else tuple(grads))
        parts, length = encode_result_parts(result, True)
        answered = (*names, said, parts[0])  # kept when its arrays are sent as they are (wire dtypes, contiguous)
        if all(dtype in WIRE_DTYPES for _, dtype in said) and _repeated(answered, result.plan, result.outputs, grads):
            self.answered = answered
        return parts, length

    @classmethod
    def of(cls, request: Request, header: dict | None = None) -> Layout | None:
        """The layout of a decoded `request` (of `header`, an in-process one's); None for one that uploads."""
        if request.upload:
            return None
        tensors, offset = [], 0
        for whose in ("inputs", "grad_outputs"):
            for name, array in getattr(request, whose).items():
                tensors.append((whose, name, array.dtype, array.size, offset, array.shape))
                offset += array.nbytes
        fields = {k: v for k, v in vars(request).items() if k not in ("inputs", "grad_outputs", "upload")}
        return cls(fields, tensors, offset, header)

    def repeat(self, header: dict, inputs, grad_outputs) -> Request | None:
        """The Request of an in-process request of this layout's `header` whose arrays [(name, array)] have its
        names, dtypes and shapes (else None), made as the one it was learned from: they reach the executor
        as read-only views."""
        tensors = self.tensors
        if len(inputs) + len(grad_outputs) != len(tensors) or header != self.header:
            return None
        request = Request.__new__(Request)
        request.__dict__.update(self.fields)
        request.inputs, request.grad_outputs, request.upload, request.layout = {}, {}, {}, self
        for (whose, name, dtype, _, _, shape), (given, array) in zip(tensors, [*inputs, *grad_outputs]):
            view = numpy.asarray(array).view(numpy.ndarray)
            if given != name or view.dtype != dtype or view.shape != shape:
                return None
            view.flags.writeable = False
            getattr(request, whose)[name] = view
        return request

    def keep(self, ticket, inputs: dict) -> None:
        """Keep how `ticket` was admitted, its plan and Shapes weakly, if the plan keeps them for `inputs`."""
        kept = self.admitted.get(ticket.kind)
        if (kept is None or kept[1]() is not ticket.plan) and known_shapes(ticket.plan, inputs) is ticket.shapes:
            refs = (weakref.ref(ticket.plan), weakref.ref(ticket.shapes), ticket.cost, ticket.answer_elements)
            self.admitted[ticket.kind] = (ticket.where, *refs)


def _repeated(answered: tuple, plan, outputs: dict, given: dict | None) -> list | None:
    """[header, *buffers] of an answer (`plan`, `outputs`, `given` grads) whose header says what the `answered`
    one's did (`Layout.encode`): its header's bytes and its arrays' own; else None."""
    if plan != answered[0] or tuple(outputs) != answered[1] or (None if given is None else tuple(given)) != answered[2]:
        return None
    parts, to_numpy = [answered[4]], backend.to_numpy
    arrays = outputs.values() if given is None else (*outputs.values(), *given.values())
    for array, (shape, dtype) in zip(arrays, answered[3]):
        if array.shape != shape or array.dtype != dtype:
            return None
        view = memoryview(to_numpy(array))  # (its c_contiguous: no flags object made)
        if not view.c_contiguous:
            return None
        parts.append(view.cast("B") if array.size else b"")
    return parts


class Layouts:
    """The layouts of the last LAYOUTS distinct headers (`learn`), by the header's bytes."""

    def __init__(self, size: int = LAYOUTS):
        self.size, self._layouts, self._lock = size, {}, threading.Lock()  # {header bytes: Layout}
        self._last = (None, None)  # the last header decoded and its layout

    def decode(self, body, header_length: int, aligned: bool = True) -> Request | None:
        """The Request of a binary `body` of a learned header and tail length (else None): its arrays view `body`."""
        head = bytes(body[:header_length]) if 0 <= header_length <= MAX_HEADER else b""  # (a header past the body's
        # end: its tail's size is negative, no layout; `bytes` of bytes is the same object, no copy)
        last, numbers = self._last, None  # a client's repeat: its header compared, not hashed (~1.5k instructions)
        layout = last[1] if head == last[0] else self._layouts.get(head)
        if layout is None and (numbers := ORDER.search(head)) is not None:  # a resident step's, numbered
            layout = self._layouts.get(_unnumbered(head, numbers))
        if layout is None or len(body) - header_length != layout.size:
            return None
        self._last = (head, layout) if numbers is None else last
        request = layout.request(*layout.views(body, header_length, aligned))
        if numbers is not None:
            request.order = (int(numbers[1]), int(numbers[2]))
        return request

    def last(self, body, header_length: int) -> Layout | None:
        """The layout of the last header `decode` found, when `body` has it and a tail of its size; else None."""
        head, layout = self._last
        if layout is None or header_length < 0 or len(body) - header_length != layout.size:
            return None
        return layout if body[:header_length] == head else None

    def learn(self, body, header_length: int, header: dict, request: Request) -> None:
        """Keep the layout of a request made of `body`, unless it has JSON tensors or uploads."""
        objs = (header.get("inputs") or []) + (header.get("grad_outputs") or [])
        if header_length > MAX_HEADER or any("data" in obj for obj in objs):
            return
        request.layout = Layout.of(request)
        if request.layout is None:
            return
        key, order = bytes(memoryview(body)[:header_length]), request.order
        if None not in order and (numbers := ORDER.search(key)) is not None:  # a resident step's, numbered:
            step, after = order[0] + 1, order[1] + 2  # do other numbers there change its update's and nothing else?
            probe = {**header, "update": {**header["update"], "step": step, "after": after}}
            if orjson.loads(_unnumbered(key, numbers, b"%d" % step, b"%d" % after)) != probe:
                return
            key = _unnumbered(key, numbers)
        with self._lock:
            while len(self._layouts) >= self.size:
                del self._layouts[next(iter(self._layouts))]
            self._layouts[key] = request.layout


def _unnumbered(head: bytes, numbers, step: bytes = b"#", after: bytes = b"#") -> bytes:
    """A header's bytes with `step` and `after` (no JSON's: no header has those bytes) in place of its update's
    numbers (`ORDER`'s match), without the spaces that pad it (as many as the numbers' digits leave)."""
    rest = head[numbers.end(2) :].rstrip(b" ")
    return head[: numbers.start(1)] + step + head[numbers.end(1) : numbers.start(2)] + after + rest
