"""Requests and results of the graph protocol: decoding a request's JSON header and binary
tail within the limits, encoding a result as JSON or binary pieces; and the other way round for
a client (`encode_request`, `decode_result`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import backend
from engine.api import shown
from wire import codec
from wire.errors import RequestError
from wire.limits import Limits
from wire.resident_update import check_order, check_update
from wire.residents import check_session


@dataclass(frozen=True)
class Key:
    """One key of a request body, declared once: `decode_request` accepts the declared keys, and
    the OpenAPI schema of the compute bodies (`service.schema`) documents them from here. `type`
    names the key's JSON shape ("id", "graph", "string", "strings", "tensors", "parameters",
    "boolean"; `service.schema` says each as JSON Schema); `paths` are the endpoints whose schema
    documents it (none: accepted, and ignored, but not documented)."""

    name: str
    type: str
    doc: str | None = None
    paths: tuple[str, ...] = ("forward", "backward")


REQUEST = (
    Key("id", "id"),
    Key("graph", "graph"),
    Key(
        "plan",
        "string",
        "instead of graph: the plan id of an earlier answer (404 when the server no longer holds it: send the graph)",
    ),
    Key("inputs", "tensors"),
    Key("parameters", "parameters"),
    Key("grad_outputs", "tensors", paths=("backward",)),
    Key("wrt", "strings", paths=("backward",)),
    Key("tape", "string", "a tape id from a retained /forward or /backward", paths=("backward",)),
    Key("outputs", "tensors", paths=()),  # an Open Inference Protocol habit, accepted and ignored
    # resident arrays (wire.residents): kept across requests under (session, handle)
    Key("session", "string", "the session resident arrays are kept under: a random id of 16 to 128 characters"),
    Key("upload", "tensors", "arrays to keep resident, each under its name (its handle), before the graph runs"),
    Key("update", "update", "an optimizer step applied in place to resident inputs after the backward", paths=()),
    Key("fetch", "strings", "resident handles whose arrays the answer carries (as 'fetched')"),
    Key("free", "strings", "resident handles to drop once the request has run"),
)
RESIDENT_KEYS = ("upload", "update", "fetch", "free")
SESSION_KEYS = frozenset(("session", *RESIDENT_KEYS))  # a request with any of these (not null) has resident arrays
PARAMETER_KEYS = (
    Key("retain_graph", "boolean", "keep the tape for a later /backward"),
    Key("binary_data_output", "boolean", "answer with the binary tensor extension"),
    Key("detect_anomaly", "boolean", "stop a backward at a node whose gradient holds a NaN (torch's anomaly mode)"),
)
REQUEST_KEYS = frozenset(key.name for key in REQUEST)
PARAMETERS = frozenset(key.name for key in PARAMETER_KEYS)


@dataclass
class Request:
    graph: dict | None = None
    plan: str | None = None  # the id of a graph the server planned before (instead of `graph`)
    inputs: dict = field(default_factory=dict)
    grad_outputs: dict = field(default_factory=dict)
    wrt: list | None = None
    id: object = None
    tape: str | None = None
    retain_graph: bool = False
    binary_output: bool = False
    detect_anomaly: bool = False  # parameters.detect_anomaly: its backward walks check for NaN (on the engine)
    planned: tuple | None = field(default=None, repr=False)  # (plan, Shapes or None, cache key), once planned
    held: tuple | None = field(default=None, repr=False)  # (Plan, key) the server holds (a model's), instead of graph
    # which tensors its answer encodes as JSON (wire.admission.JsonAnswer: bounded by max_json_output_elements);
    # None: none (a binary answer, or arrays handed over in-process)
    json_answer: object = field(default=None, repr=False)
    session: str | None = None  # wire.residents: the session its resident arrays are kept under
    scope: str | None = field(default=None, repr=False)  # set by the service: who sent it (its API key's digest)
    upload: dict = field(default_factory=dict)  # {handle: array} to keep resident
    update: list | None = None  # wire.resident_update.check_update's groups
    order: tuple = (None, None)  # the update's (step, after): wire.resident_update.check_order
    fetch: list | None = None  # resident handles to answer with
    free: list | None = None  # resident handles to drop after running
    layout: object = field(default=None, repr=False)  # wire.layouts.Layout of a binary request's header

    @property
    def resident_only(self) -> bool:
        """Whether it only moves resident arrays (no graph, plan or tape to run)."""
        return self.graph is None and self.plan is None and self.tape is None and self.held is None


@dataclass
class Result:
    id: object
    outputs: dict
    grads: dict | None = None
    tape: str | None = None
    plan: str | None = None  # the id under which the server keeps the request's plan
    ran: str | None = None  # what ran it: "engine", "interpreted" or "compiled" (wire.compile.run_compiled)
    fetched: dict | None = None  # {handle: array} of the resident arrays the request fetched
    layout: object = field(default=None, repr=False)  # an in-process request's wire.layouts.Layout (run_arrays)


def tensor_map(pairs, where):
    out = {}
    for name, array in pairs:
        if name in out:
            raise RequestError(f"{where}: tensor {shown(name)} is given twice", node=name, field=where)
        out[name] = array
    return out


def decode_request(header, tail, limits: Limits, aligned: bool = True) -> Request:
    """A Request from a parsed JSON header and the body's binary tail (None for plain JSON);
    `aligned=False`: see `codec.decode_tensors`."""
    if not isinstance(header, dict):
        raise RequestError("the body must be a JSON object", kind="malformed")
    if not REQUEST_KEYS.issuperset(header):
        unknown = sorted(set(header) - REQUEST_KEYS)
        raise RequestError(f"unknown field(s) in request: {', '.join(unknown)}", field=unknown[0])
    get = header.get
    params = get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError("'parameters' must be an object", field="parameters")
    retain_graph = params.get("retain_graph", False)
    binary_output = params.get("binary_data_output", False)
    detect_anomaly = params.get("detect_anomaly", False)
    for key, value in (
        ("retain_graph", retain_graph),
        ("binary_data_output", binary_output),
        ("detect_anomaly", detect_anomaly),
    ):
        if type(value) is not bool:
            raise RequestError(f"parameters.{key} must be true or false", field=f"parameters.{key}")
    rid = get("id")
    if rid is not None and not isinstance(rid, (str, int)):
        raise RequestError("'id' must be a string or an integer", field="id")
    wrt = get("wrt")
    if wrt is not None and (not isinstance(wrt, list) or not all(isinstance(w, str) for w in wrt)):
        raise RequestError("'wrt' must be a list of input names", field="wrt")
    tape = get("tape")
    if tape is not None and not isinstance(tape, str):
        raise RequestError("'tape' must be a string", field="tape")
    plan = get("plan")
    if plan is not None and (not isinstance(plan, str) or get("graph") is not None):
        raise RequestError(
            "'plan' must be a string (a plan id an earlier answer gave), sent instead of 'graph'", field="plan"
        )
    input_objs, grad_objs, upload_objs = get("inputs"), get("grad_outputs"), get("upload")
    checked = []
    for where, objs in (("inputs", input_objs), ("grad_outputs", grad_objs), ("upload", upload_objs)):
        if objs is not None and not isinstance(objs, list):
            raise RequestError(f"'{where}' must be a list of tensor objects", field=where)
        checked.append(codec.check_headers(objs, where, limits.max_tensor_elements))
    check_total(sum(h[3] for c in checked for h in c), limits)
    most = limits.max_tensor_elements
    inputs, offset = codec.decode_tensors(input_objs, "inputs", tail, 0, most, checked[0], aligned)
    grads, offset = codec.decode_tensors(grad_objs, "grad_outputs", tail, offset, most, checked[1], aligned)
    uploads, offset = codec.decode_tensors(upload_objs, "upload", tail, offset, most, checked[2], aligned)
    if tail is not None and offset != len(tail):
        raise RequestError(
            f"the body has {len(tail) - offset} bytes of binary data that no tensor claims",
            field=codec.HEADER_LENGTH,
            kind="malformed",
        )
    request = Request(
        graph=get("graph"),
        plan=plan,
        inputs=tensor_map(inputs, "inputs"),
        grad_outputs=tensor_map(grads, "grad_outputs"),
        wrt=wrt,
        id=rid,
        tape=tape,
        retain_graph=retain_graph,
        binary_output=binary_output,
        detect_anomaly=detect_anomaly,
    )
    if not SESSION_KEYS.isdisjoint(header) and any(get(key) is not None for key in SESSION_KEYS):
        _decode_resident_keys(request, get, tensor_map(uploads, "upload"))
    return request


def _decode_resident_keys(request: Request, get, uploads: dict) -> None:
    """The resident-array keys of a request (`wire.residents`): they need its session."""
    session = get("session")
    check_session(session)
    request.session = session
    request.upload = uploads
    for key in ("fetch", "free"):
        handles = get(key)
        if handles is not None and (not isinstance(handles, list) or not all(isinstance(h, str) for h in handles)):
            raise RequestError(f"'{key}' must be a list of resident handles", field=key)
        setattr(request, key, handles)
    if get("update") is not None:
        request.update, request.order = check_update(get("update")), check_order(get("update"))
        if request.retain_graph:
            raise RequestError(
                "an update changes its resident inputs in place, which a retained tape still reads: "
                "send it without retain_graph",
                field="update",
            )


def check_total(total: int, limits: Limits):
    """Refuse (413) a request whose tensors hold `total` elements, over the limit."""
    if total > limits.max_total_elements:
        raise RequestError(
            f"the request's tensors hold {total} elements, over the limit of {limits.max_total_elements}",
            field="inputs",
            kind="too_large",
        )


def encode_message(body: dict, keys, binary: bool) -> tuple[list, int | None]:
    """([body pieces], header length or None) of a message `body` whose `keys` (those present)
    hold [(name, array)] pairs, encoded in place as JSON or binary tensor objects. Binary pieces
    are the JSON header then zero-copy views of the arrays: send them in order, or join them."""
    buffers = []
    encode = (lambda n, a: codec.encode_binary(n, a, buffers)) if binary else codec.encode_json
    for key in keys:
        if key in body:
            body[key] = [encode(name, backend.to_numpy(a)) for name, a in body[key]]
    if binary:
        return codec.body_parts(body, buffers)
    return [codec.dumps(body)], None


def encode_request(
    header: dict, inputs=(), grad_outputs=(), binary: bool = True, upload=()
) -> tuple[bytes, int | None]:
    """(body, header length or None) of a request: its JSON `header` without tensors, and its
    [(name, array)] tensors (`upload`: those to keep resident); a binary request asks for a binary answer."""
    header = dict(header)
    if inputs:
        header["inputs"] = inputs
    if grad_outputs:
        header["grad_outputs"] = grad_outputs
    if upload:
        header["upload"] = upload
    if binary:
        header["parameters"] = {**header.get("parameters", {}), "binary_data_output": True}
    parts, length = encode_message(header, ("inputs", "grad_outputs", "upload"), binary)
    return parts[0] if len(parts) == 1 else b"".join(parts), length


def encode_result_parts(result: Result, binary: bool) -> tuple[list, int | None]:
    """([body pieces], header length or None) of a Result in JSON or binary form (`encode_message`)."""
    body = {"id": result.id} if result.id is not None else {}
    body["outputs"] = result.outputs.items()
    if result.grads is not None:
        body["grads"] = result.grads.items()
    if result.tape is not None:
        body["tape"] = result.tape
    if result.plan is not None:
        body["plan"] = result.plan
    if result.fetched:
        body["fetched"] = result.fetched.items()
    return encode_message(body, ("outputs", "grads", "fetched"), binary)


def encode_result(result: Result, binary: bool) -> tuple[bytes, int | None]:
    """(body bytes, header length or None) of a Result in JSON or binary form."""
    parts, length = encode_result_parts(result, binary)
    return parts[0] if len(parts) == 1 else b"".join(parts), length


def decode_result(header: dict, tail, max_elements: int) -> Result:
    """A Result from an answer's parsed JSON header and binary tail (None for plain JSON)."""
    outputs, offset = codec.decode_tensors(header.get("outputs"), "outputs", tail, 0, max_elements)
    grads, offset = codec.decode_tensors(header.get("grads"), "grads", tail, offset, max_elements)
    fetched, _ = codec.decode_tensors(header.get("fetched"), "fetched", tail, offset, max_elements)
    result = Result(header.get("id"), dict(outputs), dict(grads), header.get("tape"), header.get("plan"))
    result.fetched = dict(fetched)
    return result
