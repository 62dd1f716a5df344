"""Running documented examples: live servers, a working directory per document, and chains of
blocks run in one shell session (bash) or one Python process.

Every `127.0.0.1:PORT` or `localhost:PORT` in a block is replaced by the address of the server
its chain runs against, and that address is written back as the documented one in what it prints.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.docs.extract import ROOT, Block, Fence, transcript

ADDRESS = re.compile(r"(?<![\w.])(?:127\.0\.0\.1|localhost):\d{2,5}\b")
TIMEOUT_S = 120


@dataclass
class Ran:
    """What a block printed: one text per transcript command, or one for a script; `error` says
    why it stopped early (None when every command finished with status 0)."""

    printed: list[str]
    error: str | None = None


def environment() -> dict[str, str]:
    """The caller's environment without GRADSERVE_* settings, running this checkout's code with
    this interpreter (as `python` and `python3`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(log: Path, settings: dict[str, str] | None = None):
    """`python -m service` with its defaults (CPU) plus `settings`; yields its host:port."""
    port = free_port()
    env = {**environment(), "GRADSERVE_HOST": "127.0.0.1", "GRADSERVE_PORT": str(port), "GRADSERVE_DEVICE": "cpu"}
    env.update(settings or {})
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:  # uvicorn listens once the app has started; no request, so /metrics shows none
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not ready within 30 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def server_settings(block: Block) -> dict[str, str]:
    """The settings of a `<!-- server: NAME=value ... -->` mark."""
    settings = {}
    for item in block.marks["server"].split():
        name, _, value = item.partition("=")
        if not name.startswith("GRADSERVE_") or not value:
            raise ValueError(f"{block.id}: write <!-- server: GRADSERVE_NAME=value ... -->, not {item!r}")
        settings[name] = value
    return settings


def write_files(files: list[Fence], workdir: Path) -> None:
    for fence in files:
        name = fence.marks["file"]
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"{fence.id}: a file mark names a file inside the working directory, not {name!r}")
        (workdir / name).write_text(fence.text)


def run_chain(chain: list[Block], address: str, workdir: Path) -> list[Ran]:
    """Run a chain against the server at `address` in `workdir`: one Ran per block."""
    documented = next((m.group(0) for b in chain if (m := ADDRESS.search(b.code))), "127.0.0.1:8000")
    run = run_python if chain[0].language == "python" else run_shell
    ran = run(chain, lambda code: ADDRESS.sub(address, code), workdir)
    for result in ran:
        result.printed = [text.replace(address, documented) for text in result.printed]
    return ran


def split(stdout: str, sentinel: str, expected: int) -> tuple[list[str], str | None]:
    """(the texts between sentinels, the text after the last one when fewer than expected came)."""
    pieces = stdout.split(f"\n{sentinel}\n")
    done, rest = pieces[:-1], pieces[-1]
    return done, (rest if len(done) < expected else None)


def run_shell(chain: list[Block], substitute, workdir: Path) -> list[Ran]:
    sentinel = f"@@block-done-{secrets.token_hex(8)}@@"
    script, owners = ["set -eo pipefail", "exec 2>&1"], []
    for index, block in enumerate(chain):
        commands = transcript(block)
        for text in [c.text for c in commands] if commands is not None else [block.code]:
            script += [substitute(text), f"printf '\\n%s\\n' '{sentinel}'"]
            owners.append(index)
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=workdir,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    finished, rest = split(done.stdout, sentinel, len(owners))
    ran = [Ran([]) for _ in chain]
    for owner, text in zip(owners, finished):
        ran[owner].printed.append(text)
    if rest is not None:
        failed = ran[owners[len(finished)]]
        failed.printed.append(rest)
        failed.error = f"exit status {done.returncode} (the shell stops at a failing command); it printed:\n{rest}"
    elif done.returncode:
        ran[-1].error = f"the session ended with exit status {done.returncode}:\n{done.stdout[-4000:]}"
    return ran


def run_python(chain: list[Block], substitute, workdir: Path) -> list[Ran]:
    sentinel = f"@@block-done-{secrets.token_hex(8)}@@"
    payload = workdir / f"chain-{secrets.token_hex(4)}.json"
    payload.write_text(
        json.dumps([{"path": b.fence.path, "line": b.fence.line, "code": substitute(b.code)} for b in chain])
    )
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("exec_blocks.py")), str(payload), sentinel],
        cwd=workdir,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    finished, rest = split(done.stdout, sentinel, len(chain))
    ran = [Ran([text]) for text in finished] + [Ran([]) for _ in chain[len(finished) :]]
    if rest is not None:
        failed = ran[len(finished)]
        failed.printed.append(rest)
        failed.error = f"exit status {done.returncode}; it printed:\n{rest}\nstderr:\n{done.stderr[-4000:]}"
    elif done.returncode:
        ran[-1].error = f"the interpreter ended with exit status {done.returncode}:\n{done.stderr[-4000:]}"
    return ran
