"""LitServe + torch: the serving framework a user might pick instead of gradserve (issue 24's service peer).

`python -m benchmarks.litserve_app PORT` serves `POST /seed/backward` and `POST /tiny/backward` with the
gradients `benchmarks.endpoints` computes with torch (the same functions), written the LitServe way: one
`LitAPI` per route whose `decode_request` gets the JSON body LitServe parsed, `predict` runs torch
autograd in LitServe's inference worker process, and `encode_response` answers in gradserve's shape
(orjson, as the hand-written endpoint does). LitServe reads JSON bodies only (`request.json()`), so
the binary requests are not sent to it. `GET /healthz` answers once the worker is ready.
"""

from __future__ import annotations

import sys

import litserve as ls
from fastapi import Response

from benchmarks import endpoints


class Backward(ls.LitAPI):
    """One model's route: the request's input tensors in, its outputs and gradients out."""

    def __init__(self, model: str):
        super().__init__(api_path=f"/{model}/backward")
        self.model = model

    def setup(self, device):
        self.run = endpoints.torch_models()[self.model]

    def decode_request(self, request):
        return endpoints.tensors_of(request)

    def predict(self, arrays):
        return self.run(arrays)

    def encode_response(self, output) -> Response:
        body, _ = endpoints.write_outputs(*output, binary=False)
        return Response(body, media_type="application/json")


def server() -> ls.LitServer:
    return ls.LitServer(
        [Backward("seed"), Backward("tiny")], accelerator="cpu", workers_per_device=1, healthcheck_path="/healthz"
    )


def main(argv) -> None:
    server().run(host="127.0.0.1", port=int(argv[0]), log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main(sys.argv[1:])
