"""`gradserve serve`: run the service under uvicorn; `gradserve --version`.

Settings, highest precedence first: flags, GRADSERVE_* variables, the TOML file of `--config`,
the defaults (service/settings.py). A GRADSERVE_* variable that names no setting is warned about
at start, and refused (exit 2) with `--strict-env` or GRADSERVE_STRICT_ENV=1. The settings reach
the app (in this process or in each of `--workers` processes) as environment variables read by
`service.app:create_app`, which uvicorn calls (`worker_app`) as a factory. Logging (text or JSON lines,
one per request; service/logs.py) is configured by uvicorn in each process from `log_config`.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import logging.config
import os
import signal
import sys
import threading
import time

from service.version import __version__
from wire import calibrate, show

log = logging.getLogger("gradserve")
FLAGS = ("host", "port", "device", "workers", "log_level", "log_format", "strict_env", "model_repository")
FD_RESERVE = 64  # descriptors kept for files, pipes and the listening socket
BACKLOG = 1024  # connections the kernel queues before accept
EXIT_GRACE_S = 3.0  # after the drain, how long cancelled computations get to stop


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradserve", description="gradserve: a gradient computation microservice")
    parser.add_argument("--version", action="version", version=f"gradserve {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True)
    serve = verbs.add_parser(
        "serve", help="run the HTTP service (settings: flags > GRADSERVE_* env vars > --config file > defaults)"
    )
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--device", choices=("auto", "cpu", "cuda"), help="array backend (default auto)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1; tapes live per process)")
    serve.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
        help="log level (default info)",
    )
    serve.add_argument("--log-format", choices=("text", "json"), help="log lines as text or JSON (default text)")
    serve.add_argument(
        "--strict-env",
        action="store_true",
        default=None,
        help="refuse to start when a GRADSERVE_* environment variable names no setting (default: warn)",
    )
    serve.add_argument(
        "--model-repository",
        metavar="DIR",
        help="load the ONNX models of DIR (Triton's layout: DIR/<name>/<version>/model.onnx) at start",
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of settings (keys: the settings' names); env vars and flags override it",
    )
    calibrate.add_parser(verbs)
    show.add_parser(verbs)
    return parser


def _exit_quietly(signum, frame):
    # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully; we land here
    # instead of dying of the signal, so a graceful stop exits 0.
    raise SystemExit(0)


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve to anything


def warn_if_exposed(settings) -> None:
    """A loud warning when the server is reachable from the network without an API key."""
    if settings.api_key is None and not is_loopback(settings.host):
        log.warning(
            "WARNING: gradserve is binding %s without an API key: anyone who can reach this address can run "
            "computations on it. Set GRADSERVE_API_KEY, or bind 127.0.0.1 behind a proxy that authenticates.",
            settings.host,
        )


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (connections are capped
    by max_connections, below it); the new soft limit."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def _check_connection_cap(settings, fd_limit: int) -> None:
    room = fd_limit - FD_RESERVE
    if 0 <= fd_limit and settings.max_connections > room:
        print(
            f"gradserve: max_connections={settings.max_connections} does not fit the open-file limit {fd_limit}; "
            f"using {max(1, room)}",
            file=sys.stderr,
        )
        settings.max_connections = max(1, room)


def _exit_after_drain(grace_s: float) -> None:
    """After uvicorn returns: when the shutdown cancelled computations still running, give them
    `grace_s` to stop at their next graph step, then exit without waiting for an op still running."""
    from service.compute import CANCELLED_AT_SHUTDOWN

    if not CANCELLED_AT_SHUTDOWN.is_set():
        return
    deadline = time.monotonic() + grace_s
    for thread in threading.enumerate():
        if thread.name.startswith("gradserve-compute"):
            thread.join(max(0.0, deadline - time.monotonic()))
    if any(t.name.startswith("gradserve-compute") and t.is_alive() for t in threading.enumerate()):
        logging.getLogger("gradserve").warning("exiting with a cancelled computation still inside an op")
        logging.shutdown()
        os._exit(0)


def worker_app():
    """`create_app()` as uvicorn's factory: it runs in the context that the worker's request tasks
    copy, so IEEE results stop being warnings there once (`wire.handler.quiet_ieee`), not per request."""
    from service.app import create_app
    from wire.handler import quiet_ieee

    quiet_ieee()
    return create_app()


def serve(settings, unknown_env: list[str] = ()) -> int:
    import uvicorn

    from engine import backend
    from service.logs import log_config

    logging_config = log_config(settings.log_level, settings.log_format)
    logging.config.dictConfig(logging_config)  # uvicorn applies it again, here and in each worker
    for line in unknown_env:
        log.warning("unknown environment variable %s: ignored (refused with --strict-env)", line)
    backend.use(settings.device)  # fail here, with one line, when the device is not there
    if settings.model_repository is not None:
        from service.oip.onnx_models import check_repository

        check_repository(settings.model_repository)  # fail here, with one line, before uvicorn starts
    warn_if_exposed(settings)
    _check_connection_cap(settings, raise_fd_limit())

    os.environ.update(settings.to_env())
    signal.signal(signal.SIGTERM, _exit_quietly)
    from service.compute import CANCELLED_AT_SHUTDOWN

    CANCELLED_AT_SHUTDOWN.clear()  # only a shutdown of the server started here may end the process early
    try:
        uvicorn.run(
            "service.cli:worker_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            log_config=logging_config,
            timeout_graceful_shutdown=settings.timeout_graceful_shutdown,
            proxy_headers=False,
            server_header=False,
            http="service.connections:BoundedProtocol",
            timeout_keep_alive=settings.keep_alive_timeout_s,
            backlog=BACKLOG,
            access_log=False,  # service.logs writes one line per request, cheaper, with its request id
        )
    finally:
        _exit_after_drain(EXIT_GRACE_S)
    return 0


def _no_numpy_huge_pages() -> None:
    """NumPy marks each array of 4 MiB or more for transparent huge pages (madvise); where the
    kernel compacts memory for those at first touch (`defrag` "madvise", the default), a request
    that allocates such arrays stalls on it, more so as a long-running server's memory fragments
    (a 64 MiB `/forward`: 430 ms against 270 ms without, on a 2-core VM). So the service runs
    without them unless NUMPY_MADVISE_HUGEPAGE says otherwise (NumPy reads it when imported,
    here before the engine imports it, and the workers inherit it)."""
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.verb == "calibrate":
        return calibrate.main(args)
    if args.verb == "plan":
        return show.main(args)
    _no_numpy_huge_pages()
    overrides = {name: getattr(args, name) for name in FLAGS if getattr(args, name, None) is not None}
    if args.device:  # the engine picks its backend from GRADSERVE_DEVICE when first imported
        os.environ["GRADSERVE_DEVICE"] = args.device
    try:
        from pydantic import ValidationError

        from service.settings import (  # imports the engine, which reads GRADSERVE_DEVICE
            ConfigError,
            load_settings,
            unknown_env,
        )
    except RuntimeError as err:
        print(f"gradserve: {err}", file=sys.stderr)
        return 1
    try:
        settings = load_settings(overrides, args.config)
    except ConfigError as err:
        print(f"gradserve: {err}", file=sys.stderr)
        return 2
    except ValidationError as err:
        print(f"gradserve: invalid settings:\n{err}", file=sys.stderr)
        return 2
    unknown = unknown_env(os.environ)
    if unknown and settings.strict_env:
        names = "; ".join(unknown)
        print(f"gradserve: unknown environment variable(s), refused (strict_env): {names}", file=sys.stderr)
        return 2
    if args.verb != "serve":  # pragma: no cover - argparse rejects unknown verbs
        return 2
    try:
        return serve(settings, unknown)
    except RuntimeError as err:
        print(f"gradserve: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
