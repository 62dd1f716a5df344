"""OpenAPI descriptions of the Open Inference Protocol endpoints (documentation only: bodies are
parsed by hand, never by pydantic). `infer_paths()` describes infer, a plain ASGI route FastAPI
does not see; `responses(...)` and `LOAD_BODY` are given to the FastAPI routes' decorators."""

from __future__ import annotations

from service.oip.infer import INFER_KEYS
from service.schema import ERROR, TENSOR
from wire.codec import HEADER_LENGTH

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
TAG = "open inference protocol"
INFER_PATHS = ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer")

REQUESTED_OUTPUT = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "description": "a graph output, or grad:<input> for a gradient"},
        "parameters": {
            "type": "object",
            "properties": {"binary_data": {"type": "boolean", "description": "this output in binary"}},
        },
    },
}

INFER_REQUEST = {
    "type": "object",
    "description": "Graph outputs only is a forward; any grad:<input> output adds a backward with those inputs "
    "as wrt. No `outputs`: every output of the model's metadata. Input tensors named grad_output:<output> seed "
    "the backward of outputs that are not scalars.",
    "properties": {
        "id": {"type": ["string", "integer"]},
        "inputs": {"type": "array", "items": TENSOR},
        "outputs": {"type": "array", "minItems": 1, "items": REQUESTED_OUTPUT},
        "parameters": {
            "type": "object",
            "properties": {
                "binary_data_output": {"type": "boolean", "description": "every output in binary by default"}
            },
        },
        "model_name": {"type": "string", "description": "when given, the path's model name"},
        "model_version": {"type": "string", "description": "when given, the model's version"},
    },
    "additionalProperties": False,
}
assert set(INFER_REQUEST["properties"]) == INFER_KEYS, "the infer request's description names every key it takes"

INFER_RESPONSE = {
    "type": "object",
    "required": ["model_name", "model_version", "outputs"],
    "properties": {
        "id": {"type": ["string", "integer"]},
        "model_name": {"type": "string"},
        "model_version": {"type": "string"},
        "outputs": {"type": "array", "items": TENSOR},
    },
}

TENSOR_METADATA = {
    "type": "object",
    "required": ["name", "datatype", "shape"],
    "properties": {
        "name": {"type": "string"},
        "datatype": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer"}, "description": "-1 where unknown until run"},
    },
}

MODEL_METADATA = {
    "type": "object",
    "required": ["name", "versions", "platform", "inputs", "outputs"],
    "properties": {
        "name": {"type": "string"},
        "versions": {"type": "array", "items": {"type": "string"}},
        "platform": {"type": "string"},
        "inputs": {"type": "array", "items": TENSOR_METADATA},
        "outputs": {"type": "array", "items": TENSOR_METADATA},
    },
}

MODEL_CONFIG = {
    "type": "object",
    "description": "Triton's model configuration of the graph, and the graph itself",
    "required": ["name", "platform", "input", "output", "graph"],
    "properties": {
        "name": {"type": "string"},
        "platform": {"type": "string"},
        "backend": {"type": "string"},
        "max_batch_size": {"type": "integer"},
        "input": {"type": "array", "items": {"type": "object"}},
        "output": {"type": "array", "items": {"type": "object"}},
        "graph": {"type": "object", "description": "the graph (graph format v1) the model was loaded with"},
    },
}

REPOSITORY_INDEX = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["name", "version", "state", "reason"],
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "state": {"type": "string", "enum": ["READY"]},
            "reason": {"type": "string"},
        },
    },
}

EMPTY = {"type": "object", "maxProperties": 0}

SERVER_METADATA = {
    "type": "object",
    "required": ["name", "version", "extensions"],
    "properties": {
        "name": {"type": "string"},
        "version": {"type": "string"},
        "extensions": {"type": "array", "items": {"type": "string"}},
    },
}

LIVE = {"type": "object", "required": ["live"], "properties": {"live": {"type": "boolean"}}}
READY = {"type": "object", "required": ["ready"], "properties": {"ready": {"type": "boolean"}}}
MODEL_READY = {
    "type": "object",
    "required": ["name", "ready"],
    "properties": {"name": {"type": "string"}, "ready": {"type": "boolean"}},
}
NOT_READY = {**ERROR, "properties": {**ERROR["properties"], "ready": {"type": "boolean"}}}

ERRORS = {
    400: "malformed body (bad JSON, bad binary header length, truncated binary data) or model name",
    401: "missing or wrong API key (when GRADSERVE_API_KEY is set)",
    404: "unknown model, or a version it does not have",
    409: "the repository already holds max_models models",
    413: "over a size limit (body, tensor, max_model_bytes, JSON outputs)",
    415: "Content-Type is not application/json or application/octet-stream (or is missing)",
    422: "invalid graph, tensors or parameters",
    503: "busy (max_concurrency) or compute timeout; see Retry-After",
    507: "out of memory",
}

LOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            JSON: {
                "schema": {
                    "type": "object",
                    "required": ["parameters"],
                    "properties": {
                        "parameters": {
                            "type": "object",
                            "description": "a graph as `config`; or an ONNX model as one `file:<version>/<name>.onnx` "
                            "(its bytes in base64, as tritonclient's load_model(files=...) sends them), `config` "
                            "then being its Triton model configuration (JSON; optional)",
                            "properties": {
                                "config": {
                                    "description": "the graph (graph format v1, as POST /forward takes it), as "
                                    "a JSON string (tritonclient's load_model(config=...)) or an object; with a "
                                    "model file, its Triton model configuration (parameters.parameter_gradients)",
                                    "type": ["string", "object"],
                                }
                            },
                            "patternProperties": {
                                "^file:[0-9]+/[A-Za-z0-9_.-]+[.]onnx$": {
                                    "description": "an ONNX model file, in base64 (at most max_onnx_model_bytes)",
                                    "type": "string",
                                    "contentEncoding": "base64",
                                }
                            },
                            "additionalProperties": False,
                        }
                    },
                }
            }
        },
    }
}

OPTIONAL_BODY = {
    "requestBody": {
        "required": False,
        "content": {JSON: {"schema": {"type": "object", "description": "read and ignored"}}},
    }
}


def responses(description: str, schema: dict, *errors: int, **error_texts: str) -> dict:
    """A FastAPI route's `responses=`: 200 with `schema`, then each error status in the one
    error shape (`error_texts`, as s404="...", replace the default wording)."""
    table = {200: {"description": description, "content": {JSON: {"schema": schema}}}}
    for status in errors:
        text = error_texts.get(f"s{status}", ERRORS[status])
        table[status] = {"description": text, "content": {JSON: {"schema": ERROR}}}
    return table


def _infer(path: str) -> dict:
    parameters = [
        {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}, "description": "the model"},
        {
            "name": HEADER_LENGTH,
            "in": "header",
            "required": False,
            "schema": {"type": "integer", "minimum": 0},
            "description": "binary tensor extension: length of the JSON header at the start of the body",
        },
    ]
    if "{version}" in path:
        parameters.insert(1, {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}})
    table = responses("the requested outputs", INFER_RESPONSE, 400, 401, 404, 413, 415, 422, 503, 507)
    table[200]["description"] += "; binary when any output is asked in binary"
    table[200]["content"][OCTET_STREAM] = {"schema": {"type": "string", "format": "binary"}}
    versioned = "_versions__version_" if "{version}" in path else ""
    return {
        "post": {
            "tags": [TAG],
            "summary": "Infer: a model's outputs, and gradients as grad:<input> outputs",
            "operationId": f"model_infer_v2_models__name_{versioned}_infer_post",
            "parameters": parameters,
            "requestBody": {
                "required": True,
                "content": {
                    JSON: {"schema": INFER_REQUEST},
                    OCTET_STREAM: {
                        "schema": {
                            "type": "string",
                            "format": "binary",
                            "description": f"JSON header ({HEADER_LENGTH} bytes) then raw tensor data",
                        }
                    },
                },
            },
            "responses": {str(status): response for status, response in table.items()},
        }
    }


def infer_paths() -> dict:
    """The OpenAPI path items of POST /v2/models/{name}[/versions/{version}]/infer."""
    return {path: _infer(path) for path in INFER_PATHS}
