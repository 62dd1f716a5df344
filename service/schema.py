"""OpenAPI descriptions of the compute bodies (documentation only: bodies are parsed by hand
with orjson and validated by the engine, never by pydantic). The request keys and parameters are
those `wire.messages` declares (`REQUEST`, `PARAMETER_KEYS`), described here as JSON Schema."""

from __future__ import annotations

from wire.codec import DATATYPES, HEADER_LENGTH
from wire.graph import VERSIONS
from wire.messages import PARAMETER_KEYS, REQUEST

TENSOR = {
    "type": "object",
    "description": "An Open Inference Protocol tensor: `data` row-major (flat or nested; non-finite floats spelled "
    '"NaN", "Infinity", "-Infinity"), or `parameters.binary_data_size` for a binary tensor.',
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": list(DATATYPES)},
        "data": {"description": "row-major values, flat or nested (a bare value for one element)"},
        "parameters": {"type": "object", "properties": {"binary_data_size": {"type": "integer", "minimum": 0}}},
    },
}

NODE = {
    "type": "object",
    "required": ["id", "op"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "op": {
            "type": "string",
            "description": "a registry op (GET /ops), or input, constant, function, grad (version 1.1)",
        },
        "inputs": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object"},
        "requires_grad": {"type": "boolean"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "dtype": {"type": "string", "enum": list(DATATYPES)},
    },
    "additionalProperties": False,
}

GRAPH = {
    "type": "object",
    "required": ["nodes", "outputs"],
    "properties": {
        "version": {
            "description": 'the oldest graph format the graph needs (the number 1 means "1.0"; default: the server\'s)',
            "enum": [1, *VERSIONS],
        },
        "nodes": {"type": "array", "minItems": 1, "items": NODE},
        "outputs": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    },
}


def _parameters() -> dict:
    return {
        "type": "object",
        "properties": {key.name: _typed(key) for key in PARAMETER_KEYS},
        "additionalProperties": False,
    }


def _shape(type_name: str) -> dict:
    """The JSON Schema of a request key's declared type (`wire.messages.Key.type`)."""
    if type_name == "graph":
        return GRAPH
    if type_name == "parameters":
        return _parameters()
    return {
        "id": {"type": ["string", "integer"]},
        "string": {"type": "string"},
        "strings": {"type": "array", "items": {"type": "string"}},
        "tensors": {"type": "array", "items": TENSOR},
        "boolean": {"type": "boolean"},
    }[type_name]


def _typed(key) -> dict:
    shape = _shape(key.type)
    return shape if key.doc is None else {**shape, "description": key.doc}


def request_schema(kind: str) -> dict:
    """The body of POST /forward or /backward, from the request keys `wire.messages` declares."""
    props = {key.name: _typed(key) for key in REQUEST if kind in key.paths}
    return {"type": "object", "properties": props, "additionalProperties": False}


RESULT = {
    "type": "object",
    "required": ["outputs"],
    "properties": {
        "id": {"type": ["string", "integer"]},
        "outputs": {"type": "array", "items": TENSOR},
        "grads": {"type": "array", "items": TENSOR},
        "tape": {"type": "string"},
        "plan": {"type": "string", "description": "the id to send instead of this request's graph next time"},
    },
}

ERROR = {
    "type": "object",
    "required": ["error", "node", "field"],
    "properties": {
        "error": {"type": "string"},
        "node": {"type": ["string", "integer", "null"]},
        "field": {"type": ["string", "integer", "null"]},
        "request_id": {
            "type": "string",
            "description": "the request's id, as in the X-Request-ID response header (absent only from the "
            "refusals of a connection before its request is read: 408, 431, 503 over max_connections)",
        },
    },
}

_ERROR_CONTENT = {"application/json": {"schema": ERROR}}
ERROR_STATUSES = {
    "400": "malformed body (bad JSON, bad binary header length, truncated binary data)",
    "401": "missing or wrong API key (when GRADSERVE_API_KEY is set)",
    "404": "unknown or expired tape",
    "409": "tape already freed by a previous backward",
    "413": "over a size limit (body, tensor, nodes, depth, tape bytes)",
    "415": "Content-Type is not application/json or application/octet-stream (or is missing)",
    "422": "invalid graph or tensors",
    "503": "busy (max_concurrency) or compute timeout; see Retry-After",
    "507": "out of memory",
}


SUMMARIES = {
    "forward": "Run a graph: its outputs (optionally retaining the tape)",
    "backward": "Run a graph (or reuse a tape) and return outputs and gradients",
}


def compute_paths() -> dict:
    """The OpenAPI path items of POST /forward and /backward (plain ASGI routes, which FastAPI
    does not describe by itself)."""
    return {
        f"/{kind}": {
            "post": {
                "tags": ["compute"],
                "summary": summary,
                "operationId": f"{kind}_{kind}_post",
                **compute_openapi(kind),
            }
        }
        for kind, summary in SUMMARIES.items()
    }


def compute_openapi(kind: str) -> dict:
    """Parameters, request body and responses of POST /forward or /backward."""
    return {
        "parameters": [
            {
                "name": HEADER_LENGTH,
                "in": "header",
                "required": False,
                "schema": {"type": "integer", "minimum": 0},
                "description": "binary tensor extension: length of the JSON header at the start of the body",
            }
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": request_schema(kind)},
                "application/octet-stream": {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": f"JSON header ({HEADER_LENGTH} bytes) then raw tensor data",
                    }
                },
            },
        },
        "responses": {
            "200": {
                "description": "outputs (and grads); binary when parameters.binary_data_output is true",
                "content": {
                    "application/json": {"schema": RESULT},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                },
            },
            **{code: {"description": text, "content": _ERROR_CONTENT} for code, text in ERROR_STATUSES.items()},
        },
    }
