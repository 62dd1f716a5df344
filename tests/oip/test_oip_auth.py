"""The API key guards the model repository and the models like /forward and /backward; health
and server metadata stay open. tritonclient sends the key with `headers=`."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.http as tritonclient_http
from tritonclient.utils import InferenceServerException

from tests.oip.oip_testkit import (
    API_KEY,
    MLP,
    W,
    X,
    config,
    host_port,
    infer_input,
    mlp_expected,
    requested,
)

KEY = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def keyed(keyed_server):
    client = tritonclient_http.InferenceServerClient(url=host_port(keyed_server))
    yield client
    client.close()


def test_health_and_server_metadata_are_open(keyed):
    assert keyed.is_server_live() and keyed.is_server_ready()
    assert keyed.get_server_metadata()["name"] == "gradserve"


def test_the_key_is_required_and_then_works(keyed, keyed_server):
    for headers in (None, {"Authorization": "Bearer wrong"}):
        with pytest.raises(InferenceServerException) as err:
            keyed.load_model("guarded", config=config(MLP), headers=headers)
        assert err.value.status() == "401"
    keyed.load_model("guarded", config=config(MLP), headers=KEY)
    try:
        inputs = [infer_input("x", X, True), infer_input("w", W, True)]
        with pytest.raises(InferenceServerException) as err:
            keyed.infer("guarded", inputs)
        assert err.value.status() == "401"
        result = keyed.infer("guarded", inputs, outputs=requested("grad:w", binary=True), headers=KEY)
        np.testing.assert_allclose(result.as_numpy("grad:w"), mlp_expected()[1], rtol=1e-5, atol=1e-6)
        assert keyed.is_model_ready("guarded", headers=KEY) and not keyed.is_model_ready("guarded")
        base = keyed_server.base_url
        for method, path in (
            ("GET", "/v2/models/guarded"),
            ("GET", "/v2/models/guarded/config"),
            ("GET", "/v2/models/guarded/ready"),
            ("POST", "/v2/repository/index"),
            ("POST", "/v2/repository/models/guarded/unload"),
            ("POST", "/v2/models/nowhere/infer"),
        ):
            response = httpx.request(method, base + path)
            assert response.status_code == 401, (path, response.text)
            assert response.json()["field"] == "Authorization"
            assert response.headers["www-authenticate"] == "Bearer"
        assert keyed.get_model_metadata("guarded", headers=KEY)["name"] == "guarded"
    finally:
        keyed.unload_model("guarded", headers=KEY)


def test_openapi_marks_the_guarded_operations():
    from tests.service.service_testkit import asgi_client

    with asgi_client(api_key=API_KEY) as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert paths["/v2/repository/models/{name}/load"]["post"]["security"] == [{"bearerAuth": []}]
    assert paths["/v2/models/{name}"]["get"]["security"] == [{"bearerAuth": []}]
    assert "security" not in paths["/v2/health/live"]["get"] and "security" not in paths["/v2"]["get"]
