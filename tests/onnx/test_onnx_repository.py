"""The model repository's ONNX side without a live model: Triton's config.pbtxt and JSON
configuration as gradserve reads them, the load request's file parameters, a repository
directory that cannot be served (the server refuses to start, naming the model), and the
answer when the onnx package is missing."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from service.oip.model_config import flag, parameter, parse_json, parse_pbtxt
from service.oip.onnx_models import check_repository, files_of
from tests.service.service_testkit import ROOT, free_port, server_env
from wire.errors import GraphError
from wire.onnx import import_model

PBTXT = """
# a Triton model configuration
name: "classifier"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 3 ] } ]
parameters { key: "parameter_gradients" value { string_value: "true" } }
parameters { key: "other" value: { string_value: "x" } }
"""


def test_pbtxt_is_read_without_triton_schema():
    config = parse_pbtxt(PBTXT)
    assert config["name"] == "classifier" and config["max_batch_size"] == 8
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]
    assert parameter(config, "other", "config") == "x"
    assert flag(config, "parameter_gradients", "config") is True
    assert flag(parse_pbtxt('name: "m"'), "parameter_gradients", "config") is False


def test_json_config_parameters_as_triton_writes_them():
    config = parse_json('{"parameters": {"parameter_gradients": {"string_value": "false"}}}', "parameters.config")
    assert flag(config, "parameter_gradients", "parameters.config") is False
    with pytest.raises(GraphError, match='must be "true" or "false"'):
        flag(parse_json('{"parameters": {"parameter_gradients": "maybe"}}', "c"), "parameter_gradients", "c")
    with pytest.raises(GraphError, match="not valid JSON") as caught:
        parse_json("{", "parameters.config")
    assert caught.value.field == "parameters.config"


@pytest.mark.parametrize("text", ['name: "m', "name: {", "a { b { c }", "x: [1, 2"])
def test_broken_pbtxt_is_refused(text):
    with pytest.raises(GraphError):
        parse_pbtxt(text)


def test_load_parameters_carry_exactly_one_onnx_file():
    data = b"\x08\x07"
    assert files_of({"config": "{}", "file:3/model.onnx": base64.b64encode(data).decode()}, 100) == ("3", data)
    cases = {
        "file:1/../x.onnx": "parameters.file:1/../x.onnx",
        "file:1/weights.bin": "parameters.file:1/weights.bin",
    }
    for key, field in cases.items():
        with pytest.raises(GraphError) as caught:
            files_of({key: "AA=="}, 100)
        assert caught.value.field == field
    with pytest.raises(GraphError, match="exactly one model file"):
        files_of({"file:1/a.onnx": "AA==", "file:1/b.onnx": "AA=="}, 100)
    with pytest.raises(GraphError, match="not valid base64"):
        files_of({"file:1/model.onnx": "%%%"}, 100)
    with pytest.raises(GraphError, match="max_onnx_model_bytes") as caught:
        files_of({"file:1/model.onnx": "A" * 400}, 100)
    assert caught.value.kind == "too_large"


def test_without_the_onnx_package_the_answer_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    with pytest.raises(GraphError, match=r"pip install 'gradserve\[onnx\]'"):
        import_model(b"\x08\x07")
    with pytest.raises(RuntimeError, match=r"--model-repository needs the onnx package"):
        check_repository(str(tmp_path))


def test_a_repository_that_cannot_be_served_stops_the_start(tmp_path):
    pytest.importorskip("onnx")
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "1" / "model.onnx").write_bytes(b"not a model")
    env = server_env(host="127.0.0.1", port=free_port(), model_repository=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "service"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "model broken: not an ONNX model (the protobuf is" in done.stdout + done.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--model-repository", str(tmp_path / "nowhere")],
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "nowhere: not a directory" in missing.stderr
