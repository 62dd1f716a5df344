"""Operating the server: its log lines (JSON and text, one per request, at the log level), request
ids, unknown GRADSERVE_* variables, `--version` and `--config`, each against a real process."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.config
import re
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import orjson
import pytest
from service_testkit import EXAMPLE, ROOT, example, free_port, running_server, server_env

from service import logs
from service.settings import ConfigError, load_settings, read_config
from service.version import __version__

GENERATED = re.compile(r"[0-9a-f]{32}")
TYPO = "GRADSERVE_MAX_BODY_BYTE"  # one letter short of GRADSERVE_MAX_BODY_BYTES


def lines_of(server, wanted, timeout: float = 5.0) -> list[str]:
    """The server's log lines, once `wanted(lines)` holds (the log is written as requests end)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = server.log.read_text(errors="replace").splitlines()
        if wanted(lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def request_records(lines: list[str]) -> list[dict]:
    records = [orjson.loads(line) for line in lines]
    return [r for r in records if r["logger"] == "gradserve.access"]


# ------------------------------------------------------------------------------------------ JSON


@pytest.fixture(scope="module")
def json_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("json") / "server.log"
    with running_server(log, log_level="info", log_format="json") as server:
        yield server


def test_json_lines_carry_each_request(json_server):
    body = orjson.dumps(EXAMPLE)
    retained = httpx.post(f"{json_server.base_url}/backward", json=example(parameters={"retain_graph": True}))
    assert retained.status_code == 200, retained.text
    answers = [
        httpx.post(
            f"{json_server.base_url}/backward",
            content=body,
            headers={"Content-Type": "application/json", "X-Request-ID": f"job-7/step-{i}"},
        )
        for i in range(4)
    ]
    bad = httpx.post(f"{json_server.base_url}/forward", json={"graph": 1, "bogus": 2})
    health = httpx.get(f"{json_server.base_url}/healthz")
    ids = [r.headers["x-request-id"] for r in (retained, *answers, bad, health)]
    assert ids[1:5] == [f"job-7/step-{i}" for i in range(4)]
    lines = lines_of(json_server, lambda lines: all(any(i in line for line in lines) for i in ids))
    records = {r["request_id"]: r for r in request_records(lines)}  # every line parses as JSON
    assert set(ids) <= set(records), lines[-10:]

    for answer in answers:
        record = records[answer.headers["x-request-id"]]
        assert record["level"] == "info" and record["message"].startswith("POST /backward 200 ")
        assert (record["method"], record["route"], record["status"]) == ("POST", "/backward", 200)
        assert record["bytes_in"] == len(body) and record["bytes_out"] == len(answer.content)
        assert 0 < record["duration_ms"] < 30_000
        assert re.fullmatch(r"127\.0\.0\.1:\d+", record["peer"])
        assert record["plan"] == answer.json()["plan"]
    # the first request of a plan's request shape is the engine's, the second the engine's recorded; the
    # third runs the recorded program, then the engine, and compares them; later ones run it (its generated
    # function once ready)
    assert [records[i]["executor"] for i in ids[1:4]] == ["engine"] * 3
    assert records[ids[4]]["executor"] in ("interpreted", "compiled")
    assert records[ids[0]]["executor"] == "engine"  # a retained graph is the engine's
    # and the answer says it too, as the log does
    assert [r.headers["x-gradserve-executor"] for r in (retained, *answers)] == [
        records[i]["executor"] for i in ids[:5]
    ]
    assert "x-gradserve-executor" not in bad.headers

    error = records[ids[5]]
    assert (error["route"], error["status"]) == ("/forward", 422) and "executor" not in error
    assert bad.json()["request_id"] == ids[5] and GENERATED.fullmatch(ids[5])
    assert (records[ids[6]]["method"], records[ids[6]]["route"], records[ids[6]]["status"]) == ("GET", "/healthz", 200)


def test_json_lines_include_the_apps_own(json_server):
    records = [orjson.loads(line) for line in json_server.log.read_text().splitlines()]
    ready = [r for r in records if r["logger"] == "gradserve" and "ready on" in r["message"]]
    assert len(ready) == 1 and ready[0]["level"] == "info"
    assert ready[0]["message"].startswith(f"gradserve {__version__} ready on cpu")
    assert any(r["logger"].startswith("uvicorn") for r in records)
    assert not any(r["logger"] == "uvicorn.access" for r in records)  # ours replaces it


# ------------------------------------------------------------------------------ text and levels


def test_text_lines_and_the_unknown_variable_warning(tmp_path):
    typo = {TYPO.removeprefix("GRADSERVE_").lower(): 5}  # running_server sets GRADSERVE_<NAME> from these
    with running_server(tmp_path / "server.log", log_level="info", log_format="text", **typo) as srv:
        answer = httpx.post(f"{srv.base_url}/backward", json=EXAMPLE, headers={"X-Request-ID": "text-1"})
        assert answer.status_code == 200 and answer.headers["x-request-id"] == "text-1"
        lines = lines_of(srv, lambda lines: any("request_id=text-1" in line for line in lines))
    (line,) = [line for line in lines if "request_id=text-1" in line]
    assert re.match(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO gradserve\.access: POST /backward 200 [\d.]+ms ", line
    )
    assert f"bytes_out={len(answer.content)}" in line and "executor=" in line and "plan=" in line
    assert any(re.search(rf"INFO gradserve: gradserve {re.escape(__version__)} ready on cpu", x) for x in lines)
    (warning,) = [x for x in lines if TYPO in x]
    assert "WARNING gradserve: unknown environment variable" in warning
    assert f"did you mean {TYPO}S?" in warning


def test_log_level_filters_lines(tmp_path):
    with running_server(tmp_path / "server.log", log_level="warning", log_format="json") as srv:
        assert httpx.post(f"{srv.base_url}/backward", json=EXAMPLE).status_code == 200
        assert httpx.get(f"{srv.base_url}/healthz").status_code == 200
        time.sleep(0.3)
        records = [orjson.loads(line) for line in srv.log.read_text().splitlines()]
    assert all(r["level"] in ("warning", "error", "critical") for r in records), records
    assert not any(r["logger"] == "gradserve.access" for r in records)


# ------------------------------------------------------------------------------------ request ids


def raw_request_id(port: int, value: bytes) -> tuple[int, bytes | None, dict]:
    """GET /v2/models/missing with `X-Request-ID: value` sent as raw bytes: (status, echoed id, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"GET /v2/models/missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Request-ID: " + value + b"\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    echoed = re.search(rb"(?im)^x-request-id: *([^\r\n]*)", head)
    return status, echoed and echoed[1], orjson.loads(body) if b"application/json" in head else {}


HOSTILE = {
    "10KB": b"a" * 10_000,
    "129 chars": b"x" * 129,
    "tab": b"tab\there",
    "space": b"sp ace",
    "non-ASCII": b"caf\xc3\xa9",
    "control": b"abc\x01def",
    "DEL": b"abc\x7fdef",
    "newline": b"abc\ndef",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_request_ids_are_replaced(json_server, name):
    """Over HTTP: replaced by a generated id, or (control characters) refused by uvicorn's parser
    before any handler or log line sees them."""
    status, echoed, body = raw_request_id(json_server.port, HOSTILE[name])
    if status == 400:  # httptools refuses control characters in a header value
        assert name in ("control", "DEL", "newline") and echoed is None
        return
    assert status == 404 and echoed is not None and GENERATED.fullmatch(echoed.decode())
    assert body["request_id"] == echoed.decode()


@pytest.mark.parametrize("path", ["/forward", "/healthz"])
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_request_ids_are_replaced_in_the_app(name, path):
    """In the app itself, past any HTTP parser: a compute route (answered past the middleware)
    and a FastAPI one."""
    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings(device="cpu"))
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST" if path == "/forward" else "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"x-request-id", HOSTILE[name])],
        "client": ("127.0.0.1", 5),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    (echoed,) = [value for key, value in start["headers"] if key == b"x-request-id"]
    assert GENERATED.fullmatch(echoed.decode()), echoed
    if path == "/forward":
        assert start["status"] == 400
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        assert orjson.loads(body)["request_id"] == echoed.decode()


def test_request_ids_on_every_route(json_server):
    base = json_server.base_url
    given = "Ab0-._~:/+=!"
    status, echoed, body = raw_request_id(json_server.port, given.encode())
    assert (status, echoed, body["request_id"]) == (404, given.encode(), given)
    assert raw_request_id(json_server.port, b"y" * 128)[1] == b"y" * 128  # the longest kept
    for response in (
        httpx.get(f"{base}/v2/health/live"),
        httpx.get(f"{base}/v2"),
        httpx.get(f"{base}/info"),
        httpx.get(f"{base}/no/such/path"),
        httpx.post(f"{base}/forward", content=b"{", headers={"Content-Type": "application/json"}),
        httpx.post(f"{base}/forward", content=b"{}", headers={"Content-Type": "text/plain"}),
        httpx.post(f"{base}/v2/models/missing/infer", json={"inputs": []}),
        httpx.post(f"{base}/forward", json=EXAMPLE),
    ):
        rid = response.headers.get("x-request-id")
        assert rid and GENERATED.fullmatch(rid), (response.request.url, response.headers)
        if response.status_code >= 400:
            assert response.json()["request_id"] == rid, response.text
    one, two = (httpx.get(f"{base}/healthz").headers["x-request-id"] for _ in range(2))
    assert one != two


# ------------------------------------------------------------------------ environment and CLI


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=ROOT,
        env=env or server_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("strict", [["--strict-env"], "GRADSERVE_STRICT_ENV"])
def test_unknown_variable_refused_when_strict(strict):
    env = {**server_env(port=free_port()), TYPO: "5"}
    args = strict if isinstance(strict, list) else []
    if not args:
        env[strict] = "1"
    done = run_cli(*args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert TYPO in done.stderr and f"did you mean {TYPO}S?" in done.stderr
    assert "strict" in done.stderr


@pytest.mark.parametrize("module", ["service", "service.cli"])
def test_version(module):
    done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"gradserve {__version__}" == "gradserve 0.1.0"


def test_config_precedence_file_env_flags(tmp_path, monkeypatch):
    config = tmp_path / "gradserve.toml"
    config.write_text('max_nodes = 11\nmax_tapes = 12\ntape_ttl_s = 13.5\ncors_origins = ["https://a.example"]\n')
    for name in ("MAX_NODES", "MAX_TAPES", "TAPE_TTL_S", "CORS_ORIGINS"):
        monkeypatch.delenv(f"GRADSERVE_{name}", raising=False)
    monkeypatch.setenv("GRADSERVE_MAX_TAPES", "22")
    monkeypatch.setenv("GRADSERVE_TAPE_TTL_S", "23.5")
    monkeypatch.setenv("GRADSERVE_MAX_NODES", "")  # empty: unset, the file's value holds
    settings = load_settings({"tape_ttl_s": 33.5}, str(config))
    assert (settings.max_nodes, settings.max_tapes, settings.tape_ttl_s) == (11, 22, 33.5)
    assert settings.cors_origins == ["https://a.example"]
    assert load_settings({}).max_nodes == type(settings)().max_nodes  # no file: the default


def test_config_file_in_a_real_server(tmp_path):
    """--config's values reach the server; an env var beats the file and a flag beats both (the
    server answers on the flag's port, not the env's or the file's)."""
    port, env_port, file_port = free_port(), free_port(), free_port()
    config = tmp_path / "gradserve.toml"
    config.write_text(f"port = {file_port}\nplan_cache_size = 11\nmax_tapes = 12\nlog_format = 'json'\n")
    env = {**server_env(port=env_port), "GRADSERVE_MAX_TAPES": "22"}
    with serving(["--config", str(config), "--port", str(port)], env, tmp_path / "server.log") as base:
        limits = httpx.get(f"{base}/info").json()["limits"]
        assert (limits["plan_cache_size"], limits["max_tapes"]) == (11, 22)
        for other in (env_port, file_port):
            with pytest.raises(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{other}/healthz", timeout=1)
    assert all(orjson.loads(line) for line in (tmp_path / "server.log").read_text().splitlines())


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("max_node = 5\nport = 1\nlog_levle = 'info'\n", ["'max_node' (did you mean max_nodes?)", "'log_levle'"]),
        ("max_nodes = [", ["not valid TOML"]),
        ("max_models = -1\n", ["max_models"]),
    ],
    ids=["unknown keys", "bad TOML", "bad value"],
)
def test_bad_config_file_refused(tmp_path, text, fragments):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = run_cli("--config", str(config), env=server_env(port=free_port()))
    assert done.returncode == 2, done.stdout + done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr
    assert "'port'" not in done.stderr  # a known key is not named


def test_read_config_names_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        read_config(str(tmp_path / "missing.toml"))


@contextmanager
def serving(args: list[str], env: dict, log):
    """`python -m service ARGS`, its base URL (the port after `--port`) once /healthz answers."""
    port = int(args[args.index("--port") + 1])
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", *args], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, open(log).read()
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, open(log).read()
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0


# ------------------------------------------------------------------------------ batched lines


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_batched_request_lines_read_as_the_record_path_writes_them(fmt, monkeypatch):
    """A request line queued as its fields and formatted in the handler's batch says what the same
    line through a LogRecord says (`line`): same fields, same text, the duration included."""
    monkeypatch.setattr(logs.time, "time", lambda: 1700000000.1234)
    calls = [
        ({"method": "POST", "client": ("127.0.0.1", 5000)}, "/forward", 200, 0.0015, 10, 20, ("p1", "python")),
        ({"method": "GET"}, "/healthz", 503, 2.0, 0, 2, None),
        ({"method": "POST", "client": ("::1", 80)}, "/backward", 413, 0.000412345, 9, 0, ("p2", None)),
    ]
    written = []
    for batched in (True, False):
        logging.config.dictConfig(logs.log_config("info", fmt))
        handler = logs.ACCESS.handlers[0]
        if not batched:  # the same formatter on a plain handler: `request_line` makes a LogRecord
            plain = logging.StreamHandler(io.StringIO())
            plain.setFormatter(handler.formatter)
            logs.ACCESS.handlers = [plain]
        buffer = io.StringIO()
        monkeypatch.setattr(sys, "stderr", buffer)
        for i, (scope, route, status, seconds, received, sent, ran) in enumerate(calls):
            logs.request_line(scope, f"id{i}", route, status, seconds, received, sent, ran)
        handler.flush()
        written.append(buffer.getvalue() if batched else plain.stream.getvalue())
    logging.config.dictConfig(logs.log_config("warning", "text"))
    assert written[0] == written[1]
    assert len(written[0].splitlines()) == len(calls)
    assert "1.5ms" in written[0] and "2000.0ms" in written[0] and "0.412ms" in written[0]


def test_generated_request_ids_are_unique_and_a_forked_worker_draws_its_own():
    import os

    from service import request_id

    ids = {request_id.new_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(GENERATED.fullmatch(rid) for rid in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out at once
        os.write(write, request_id.new_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert GENERATED.fullmatch(child) and child not in ids and child[:16] != request_id.new_id()[:16]


def test_a_repeat_of_the_last_requests_headers_is_answered_as_a_first_one():
    """A compute route takes what a request's headers say from the last request's when they are the
    same bytes (service.routes.ComputeEndpoint.seen): each one still gets its own id, a safe given one
    is echoed, and a header changed in any way is read and checked again."""
    import numpy as np
    from service_testkit import asgi_client, binary_body, binary_tensor

    buffers = []
    x = binary_tensor("x", np.ones((2, 3), np.float32), buffers)
    w = binary_tensor("w", np.ones((3, 1), np.float32), buffers)
    body, headers = binary_body(example(inputs=[x, w]), buffers)
    with asgi_client() as client:
        ids = [client.post("/backward", content=body, headers=headers) for _ in range(3)]
        assert [r.status_code for r in ids] == [200] * 3
        ids = {r.headers["x-request-id"] for r in ids}
        assert len(ids) == 3 and all(GENERATED.fullmatch(rid) for rid in ids)
        for _ in range(2):
            assert (
                client.post("/backward", content=body, headers={**headers, "X-Request-ID": "a1"}).headers[
                    "x-request-id"
                ]
                == "a1"
            )
        again = client.post("/backward", content=body, headers={**headers, "X-Request-ID": "a 1"})
        assert GENERATED.fullmatch(again.headers["x-request-id"])
        for _ in range(2):
            assert (
                client.post("/backward", content=body, headers={**headers, "Content-Type": "text/plain"}).status_code
                == 415
            )
    with asgi_client(api_key="k1") as client:
        keyed = {**headers, "Authorization": "Bearer k1"}
        assert [client.post("/backward", content=body, headers=keyed).status_code for _ in range(2)] == [200, 200]
        wrong = {**headers, "Authorization": "Bearer k2"}
        assert [client.post("/backward", content=body, headers=wrong).status_code for _ in range(2)] == [401, 401]
        assert client.post("/backward", content=body, headers=keyed).status_code == 200
