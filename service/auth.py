"""Optional API key: `Authorization: Bearer <key>` on the compute endpoints when GRADSERVE_API_KEY is set."""

from __future__ import annotations

import hmac

from pydantic import SecretStr

from service.errors import ApiError

SCHEME = "bearerAuth"
CHALLENGE = {"WWW-Authenticate": "Bearer"}


def require_api_key(key: SecretStr | None, headers) -> None:
    """401 unless `headers` (a mapping of lower-case names) carry the configured key (no-op without
    one). Plain and cheap: it runs on the event loop before the body is read."""
    if key is None:
        return
    scheme, _, token = headers.get("authorization", "").partition(" ")
    expected = key.get_secret_value().encode()
    # compare_digest on equal-type bytes; a missing or non-Bearer header compares against b"" and fails.
    given = token.strip().encode() if scheme.lower() == "bearer" else b""
    if not hmac.compare_digest(given, expected):
        message = "missing API key: send 'Authorization: Bearer <key>'" if not token else "wrong API key"
        raise ApiError(401, message, field="Authorization", headers=CHALLENGE)
