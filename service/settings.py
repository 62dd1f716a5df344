"""The service's one settings object, from (highest precedence first) `gradserve serve` flags,
`GRADSERVE_<NAME>` environment variables, a TOML file (`--config FILE`, keys named as the settings
are), and the defaults. An environment variable that names no setting is warned about at start
(refused with `strict_env`); a key of the file that names no setting is refused."""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from typing import Annotated, Literal

from pydantic import Field, SecretStr, create_model, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from wire.limits import LIMIT_FIELDS, Limits

MAX_DEFAULT_CONCURRENCY = 4  # the per-request memory budgets assume at most this many at once


def default_concurrency() -> int:
    """Compute threads that fit the machine: the CPUs this process may run on, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_CONCURRENCY))


LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _limit_settings() -> type[BaseSettings]:
    """The protocol limits as settings, from their one declaration (`wire.limits.LIMIT_FIELDS`):
    same names, types, defaults, docs and lower bounds."""
    declared = {f.name: (f.type, Field(f.default, gt=f.gt, ge=f.ge, description=f.doc)) for f in LIMIT_FIELDS}
    return create_model("LimitSettings", __base__=BaseSettings, **declared)


class Settings(_limit_settings()):
    """Every knob of the service. Env: `GRADSERVE_<NAME>` (e.g. GRADSERVE_MAX_BODY_BYTES). The
    protocol limits (`wire.limits.Limits`) are declared there and derived here."""

    model_config = SettingsConfigDict(env_prefix="GRADSERVE_", env_ignore_empty=True, extra="ignore")

    # --- process
    host: str = Field("127.0.0.1", description="interface to bind; loopback unless told otherwise")
    port: int = Field(8000, ge=0, le=65535)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    workers: int = Field(1, ge=1, description="uvicorn worker processes (tapes live per process)")
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["text", "json"] = Field("text", description="log lines as text, or one JSON object a line")
    strict_env: bool = Field(False, description="refuse to start when a GRADSERVE_* variable names no setting")
    timeout_graceful_shutdown: float = Field(
        25.0, gt=0, description="seconds in-flight requests get to finish after SIGTERM"
    )

    # --- security
    api_key: SecretStr | None = Field(None, description="when set, required as 'Authorization: Bearer <key>'")
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="allowed CORS origins (comma-separated or a JSON list); empty = CORS off"
    )

    # --- connections (service/connections.py, service/body.py)
    max_connections: int = Field(1000, ge=1, description="open connections; more are answered 503 and closed at once")
    header_timeout_s: float = Field(10.0, gt=0, description="a request line and headers must arrive within this")
    body_timeout_s: float = Field(60.0, gt=0, description="a whole request body must arrive within this, else 408")
    body_idle_timeout_s: float = Field(
        10.0, gt=0, description="a request body with no byte for this long is answered 408 and closed"
    )
    keep_alive_timeout_s: int = Field(5, ge=1, description="an idle keep-alive connection is closed after this")
    max_inflight_body_bytes: int = Field(
        256 * 2**20, gt=0, description="bytes of request bodies held at once, all requests together; past it 503"
    )
    max_peer_inflight_body_bytes: int | None = Field(
        None,
        gt=0,
        description="bytes of request bodies held at once from one client address (default: the larger of "
        "max_body_bytes and half of max_inflight_body_bytes; behind a proxy, raise it)",
    )
    max_connections_per_peer: int = Field(
        500, ge=1, description="open connections from one client address (behind a proxy: raise it)"
    )

    # --- compute
    max_concurrency: int = Field(
        default_factory=default_concurrency,
        ge=1,
        description="computations at once (compute threads); default: the CPUs, at most 4",
    )
    queue_timeout_s: float = Field(
        5.0, ge=0, description="how long a heavy request waits for a compute slot before 503 + Retry-After"
    )
    compute_timeout_s: float = Field(
        60.0, gt=0, description="per request; past it the answer is 503 and the work is cancelled"
    )

    # --- model repository (Open Inference Protocol: graphs registered by name, service/oip)
    max_models: int = Field(64, ge=0, description="graphs registered at once; a load past it is refused with 409")
    max_model_bytes: int = Field(64 * 2**20, ge=0, description="bytes of graph JSON registered in all; past it 413")
    model_repository: str | None = Field(
        None, description="a directory of ONNX models in Triton's layout (<name>/<version>/model.onnx), loaded at start"
    )
    max_onnx_model_bytes: int = Field(16 * 2**20, gt=0, description="bytes of one ONNX model file; past it 413")
    max_onnx_nodes: int = Field(10_000, gt=0, description="nodes, and initializers, of one ONNX model; past it 413")

    # --- cost model (engine.costs reads GRADSERVE_COST_FACTORS itself, when first imported)
    cost_factors: str | None = Field(
        None, description="a JSON file of dtype cost factors, as `gradserve calibrate --output FILE` writes it"
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("log_level", "log_format", "device", mode="before")
    @classmethod
    def _lower(cls, value):
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value):
        if isinstance(value, str) and not value.strip():
            return None
        return value

    def peer_body_bytes(self) -> int:
        """One client address's share of the body budget: by default room for one body at its limit, or
        half the budget, whichever is larger (so one client cannot take it all, and can always send one)."""
        if self.max_peer_inflight_body_bytes is not None:
            return self.max_peer_inflight_body_bytes
        return max(self.max_body_bytes, self.max_inflight_body_bytes // 2)

    def limits(self) -> Limits:
        return Limits(**{f.name: getattr(self, f.name) for f in LIMIT_FIELDS})

    def to_env(self) -> dict[str, str]:
        """These settings as GRADSERVE_* variables (how worker processes receive them)."""
        env = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, list):
                value = json.dumps(value)
            env[f"GRADSERVE_{name.upper()}"] = str(value)
        return env


PREFIX = "GRADSERVE_"
# GRADSERVE_* variables read by something other than the server's settings
READ_ELSEWHERE = frozenset({"GRADSERVE_URL"})  # the client's default server


class ConfigError(ValueError):
    """A config file that cannot be read, or that names no setting."""


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_env(environ=os.environ) -> list[str]:
    """One line for each GRADSERVE_* variable of `environ` that names no setting, with the closest
    known name when one is close."""
    known = {PREFIX + name.upper() for name in Settings.model_fields} | READ_ELSEWHERE
    return [
        f"{name}{_suggest(name.upper(), known)}"
        for name in sorted(environ)
        if name.upper().startswith(PREFIX) and name.upper() not in known
    ]


def read_config(path: str) -> dict:
    """The settings a TOML file sets: {setting name: value}; ConfigError naming any unknown key."""
    try:
        with open(path, "rb") as file:
            values = tomllib.load(file)
    except OSError as err:
        raise ConfigError(f"cannot read the config file {path}: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"the config file {path} is not valid TOML: {err}") from None
    unknown = [key for key in values if key not in Settings.model_fields]
    if unknown:
        names = ", ".join(f"{key!r}{_suggest(key, Settings.model_fields)}" for key in unknown)
        raise ConfigError(f"unknown setting(s) in the config file {path}: {names}")
    return values


def load_settings(flags: dict, config: str | None = None, environ=os.environ) -> Settings:
    """Settings from `flags` (set ones only), else GRADSERVE_* variables of `environ`, else the
    config file `config`, else the defaults. pydantic-settings puts keyword arguments above the
    environment, so a file's value is passed only where no (non-empty) variable sets it."""
    set_in_env = {name.upper() for name, value in environ.items() if value}
    from_file = {
        name: value
        for name, value in (read_config(config) if config else {}).items()
        if PREFIX + name.upper() not in set_in_env
    }
    return Settings(**{**from_file, **flags})
