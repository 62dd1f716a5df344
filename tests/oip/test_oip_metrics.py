"""/metrics: process and Python collectors, route templates as endpoint labels, and per-model
series of registered graphs that go when the model is unloaded."""

from __future__ import annotations

import re

import httpx
import pytest
from tritonclient.utils import InferenceServerException

from tests.oip.oip_testkit import MLP, W, X, config, infer_input, requested


def scrape(server) -> str:
    return httpx.get(server.base_url + "/metrics").text


def value(text: str, series: str) -> float | None:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    return None if match is None else float(match.group(1))


def test_process_and_python_collectors(server):
    text = scrape(server)
    assert value(text, "process_resident_memory_bytes") > 0
    assert value(text, "process_cpu_seconds_total") > 0
    assert value(text, "process_open_fds") > 0
    assert re.search(r'^python_info\{.*implementation="CPython".*\} 1\.0$', text, re.MULTILINE)
    assert value(text, 'python_gc_collections_total{generation="0"}') >= 0


def test_per_model_series_come_and_go(triton, server):
    triton.load_model("counted", config=config(MLP))
    inputs = [infer_input("x", X, True), infer_input("w", W, True)]
    for _ in range(3):
        triton.infer("counted", inputs, outputs=requested("grad:w", binary=True))
    with pytest.raises(InferenceServerException):  # w missing: a 422, counted too
        triton.infer("counted", inputs[:1])
    text = scrape(server)
    assert value(text, 'gradserve_model_inferences_total{model="counted",status="200"}') == 3
    assert value(text, 'gradserve_model_inferences_total{model="counted",status="422"}') == 1
    assert value(text, 'gradserve_model_infer_duration_seconds_count{model="counted"}') == 4
    assert value(text, 'gradserve_requests_total{endpoint="/v2/models/{name}/infer",method="POST",status="200"}') >= 3
    assert value(text, "gradserve_models") >= 1
    assert value(text, "gradserve_model_bytes") >= len(config(MLP))
    triton.unload_model("counted")
    assert 'model="counted"' not in scrape(server)
