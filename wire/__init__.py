"""The wire protocol: what travels between a client and the service, and how it is run.

Above the autograd core (`engine`), below the HTTP service and the client; it knows no HTTP.

- `codec`: tensors as Open Inference Protocol objects, JSON or Triton's binary extension.
- `graph`: the graph format (parse and validate a request's graph into a `Plan`).
- `infer`: every node's shape and dtype from the inputs', before anything is computed.
- `run`: run a plan's steps on the engine (`Execution`), cooperatively cancellable.
- `differentiate`: gradients of an execution's outputs.
- `messages`: requests and results (decode and encode), `limits`: every bound.
- `stores`: the plan cache and the retained tapes; `executor`: `/forward` and `/backward` minus HTTP.
- `handler`: the same on a body's bytes (decode, execute, encode), or on arrays in-process.
- `errors`: the protocol's errors, each with a `kind` that the service maps to an HTTP status.
"""
