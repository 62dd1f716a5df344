"""/docs and /redoc render every documented operation in a real headless Chromium that can reach
nothing but 127.0.0.1, against a real server process: the pages load Swagger UI and ReDoc from the
server itself, never from a CDN (an air-gapped cluster has its docs). As a control, FastAPI's
default page, which loads Swagger UI from a CDN, does not render in the same browser.

The browser is driven over the DevTools protocol (a websocket on loopback), which shows what the
page requested and when its operations appeared. Chromium is Debian's `chromium` package; where
it is absent the test skips, unless GRADSERVE_REQUIRE_BROWSER_TEST is set (as CI sets it): then
it fails.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi.openapi.docs import get_swagger_ui_html
from service_testkit import running_server
from websockets.sync.client import connect

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
if CHROMIUM is None:
    if os.environ.get("GRADSERVE_REQUIRE_BROWSER_TEST"):
        pytest.fail("GRADSERVE_REQUIRE_BROWSER_TEST is set but no chromium is installed", pytrace=False)
    pytest.skip(
        "no chromium on PATH (apt-get install chromium; set GRADSERVE_REQUIRE_BROWSER_TEST to fail instead)",
        allow_module_level=True,
    )

# Offline: every host name but 127.0.0.1 fails to resolve, so a CDN load fails as on an air-gapped cluster.
OFFLINE_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]
# ReDoc's attribution logo is an <img> from its CDN that removes itself when it fails to load.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
RENDER_TIMEOUT_S = 60.0
INFER = "model_infer_v2_models__name__infer_post"  # the operationId of POST /v2/models/{name}/infer
# What each page shows per operation: Swagger UI's summary paths, ReDoc's operation sections.
SWAGGER_OPERATIONS = "[...document.querySelectorAll('.opblock-summary-path')].map(e => e.dataset.path)"
REDOC_OPERATIONS = "[...document.querySelectorAll('[data-section-id^=\"operation/\"]')].map(e => e.dataset.sectionId)"


class DevTools:
    """One page of a Chromium, over the DevTools protocol: commands, and the events they cause."""

    def __init__(self, socket):
        self.socket = socket
        self.ids = itertools.count(1)
        self.events = []
        self.session = None

    def call(self, method: str, **params) -> dict:
        message = {"id": next(self.ids), "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv(timeout=RENDER_TIMEOUT_S))
            if reply.get("id") != message["id"]:
                self.events.append(reply)
            elif "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            else:
                return reply["result"]

    def open_page(self) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Network.enable")
        self.call("Page.enable")

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def load(self, url: str) -> None:
        """Navigate and wait for the load event (scripts run, fetches under way)."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, f"{url} did not load within {RENDER_TIMEOUT_S} s"
            self.evaluate("1")  # a round trip, which collects the events sent meanwhile

    def wait_for(self, expression: str, count: int) -> list:
        """The value of `expression` (a list) once it has `count` items, or when the time is up."""
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        while True:
            value = self.evaluate(expression) or []
            if len(value) >= count or time.monotonic() > deadline:
                return value
            time.sleep(0.2)

    def requested(self) -> list:
        """The URLs the page requested since its last load."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def failed(self) -> list:
        failures = {e["params"]["requestId"] for e in self.events if e.get("method") == "Network.loadingFailed"}
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent" and e["params"]["requestId"] in failures
        ]


@contextmanager
def offline_chromium(profile: Path):
    """A headless Chromium that resolves no host but 127.0.0.1, with one page open over DevTools."""
    proc = subprocess.Popen(
        [CHROMIUM, *OFFLINE_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        while not (port_file.exists() and len(port_file.read_text().split()) == 2):
            assert proc.poll() is None, f"chromium exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"chromium opened no DevTools port within {RENDER_TIMEOUT_S} s"
            time.sleep(0.1)
        port, path = port_file.read_text().split()
        with connect(f"ws://127.0.0.1:{port}{path}", proxy=None, max_size=None) as socket:
            devtools = DevTools(socket)
            devtools.open_page()
            yield devtools
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory):
    """A server process with an API key: the docs stay public while the API needs the key."""
    with running_server(tmp_path_factory.mktemp("docs") / "server.log", api_key="s3cret") as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with offline_chromium(tmp_path_factory.mktemp("chromium")) as devtools:
        yield devtools


@pytest.fixture(scope="module")
def operations(guarded_server) -> list:
    """(method, path) of each operation of the server's OpenAPI document."""
    spec = httpx.get(f"{guarded_server.base_url}/openapi.json", timeout=30).json()
    return [(method, path) for path, item in spec["paths"].items() for method in item]


def _off_host(urls: list, base_url: str) -> list:
    return [url for url in urls if not url.startswith((base_url + "/", "data:", "blob:"))]


def test_swagger_ui_renders_every_operation_offline(guarded_server, browser, operations):
    browser.load(f"{guarded_server.base_url}/docs")
    shown = browser.wait_for(SWAGGER_OPERATIONS, len(operations))
    assert sorted(shown) == sorted(path for _, path in operations)
    for path in ("/forward", "/backward", "/v2/models/{name}/infer", "/v2/repository/models/{name}/load"):
        assert path in shown
    assert f"{guarded_server.base_url}/docs-assets/swagger-ui-bundle.js" in browser.requested()
    assert _off_host(browser.requested(), guarded_server.base_url) == []
    assert browser.failed() == []
    # the infer operation shows a lock: the API key is asked for where the server needs it
    locks = f"document.querySelectorAll('#{_swagger_id(INFER)} .authorization__btn').length"
    assert browser.evaluate(locks) == 1


def _swagger_id(operation_id: str) -> str:
    """The DOM id Swagger UI gives an operation of the tag 'open inference protocol'."""
    return f"operations-open_inference_protocol-{operation_id}"


def test_redoc_renders_every_operation_offline(guarded_server, browser, operations):
    browser.load(f"{guarded_server.base_url}/redoc")
    shown = browser.wait_for(REDOC_OPERATIONS, len(operations))
    assert len(shown) == len(operations)
    assert {f"operation/{op}" for op in ("forward_forward_post", "backward_backward_post", INFER)} <= set(shown)
    assert f"{guarded_server.base_url}/docs-assets/redoc.standalone.js" in browser.requested()
    assert _off_host(browser.requested(), guarded_server.base_url) in ([], [REDOC_LOGO])


def test_fastapis_cdn_page_does_not_render_in_the_same_browser(guarded_server, browser):
    """The control: the browser really is offline, so the default page (Swagger UI from a CDN) is blank."""
    html = get_swagger_ui_html(openapi_url=f"{guarded_server.base_url}/openapi.json", title="cdn").body.decode()
    browser.load("data:text/html," + quote(html))
    cdn = [url for url in browser.failed() if url.endswith("/swagger-ui-bundle.js")]
    assert cdn and cdn[0].startswith("https://"), browser.requested()
    assert browser.evaluate("typeof SwaggerUIBundle") == "undefined"
    assert browser.evaluate(SWAGGER_OPERATIONS) == []
