"""Resident arrays: named arrays a client keeps on the server across requests (its parameters and
their optimizer state), so that a training step sends only its batch.

A request names its session (`"session"`, a random id of at least MIN_SESSION_CHARS characters the
client picks) and, through the service, its scope (the API key's digest when one is set): an array is
kept under (scope, session, handle), so no other session can read or update it. A request can
`upload` arrays under handles, read them as graph inputs (`{"op": "input", "resident": handle}`),
`update` them in place by an optimizer step after its backward (`wire.resident_update`), `fetch` them
and `free` them; "handle:name" names a handle's optimizer state (uploaded so, fetched by "handle:*").

Charged like tapes (`wire.stores.TapeStore`): each array's bytes, its optimizer state's included,
count against the session's bound (`max_session_resident_bytes`) and the server's
(`max_resident_bytes`); over either, the request that would pass it is refused with 413 naming the
bound (nothing is evicted: a session's parameters are not dropped for another's). A session's arrays
expire together `resident_ttl_s` seconds after the session last used them; a handle that expired is
told so (404), as is one the server never held or lost in a restart: upload it again."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

import numpy

from engine.api import shown
from wire.errors import RequestError
from wire.limits import Limits

MIN_SESSION_CHARS = 16  # a session id must be at least this long (the client's is 32 random hex digits)
MAX_SESSION_CHARS = 128
STATE_SEPARATOR = ":"  # "handle:name" names a resident's optimizer state array (upload, fetch "handle:*")
FORGOTTEN_SESSIONS = 1024  # expired sessions remembered, to say "expired" rather than "unknown"
_NO_SESSION = threading.Lock()  # the lock of a session the store does not hold (`get` then says why: 404)


def check_session(session) -> None:
    """Refuse (422) a session id that is not a string of MIN_SESSION_CHARS to MAX_SESSION_CHARS characters."""
    if not isinstance(session, str) or not MIN_SESSION_CHARS <= len(session) <= MAX_SESSION_CHARS:
        raise RequestError(
            f"'session' must be a string of {MIN_SESSION_CHARS} to {MAX_SESSION_CHARS} characters "
            "(a random id the client picks: it is what keeps its resident arrays its own)",
            field="session",
        )


class Resident:
    """One resident array and its optimizer state ({name: array}, see `wire.resident_update`)."""

    __slots__ = ("array", "state")

    def __init__(self, array):
        self.array = array
        self.state: dict = {}

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes) + sum(int(a.nbytes) for a in self.state.values())


class _Session:
    __slots__ = ("arrays", "nbytes", "expires", "lock", "last_step")

    def __init__(self):
        self.arrays: dict[str, Resident] = {}
        self.nbytes = 0
        self.expires = 0.0
        self.last_step = None  # the "step" of the last update applied (`wire.resident_update`)
        self.lock = threading.Lock()  # held by an update, and while a view or a fetch's copy is taken


class ResidentStore:
    """Sessions' resident arrays, by (scope, session) then handle, bounded by bytes and age.

    A request's graph reads a stored array through a read-only view (`view`), which holds the array: an
    update (`wire.resident_update`, one at a time per session: `updating`) writes an array in place only
    when nothing holds it, else it replaces it with a new array, so what a request read stays as it read
    it. Views are taken, and `fetch` copies, under the session's lock, which an update holds."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._sessions: OrderedDict[tuple, _Session] = OrderedDict()  # least recently used first
        self._expired: OrderedDict[tuple, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self):
        return sum(len(s.arrays) for s in self._sessions.values())

    def _expire(self, now: float) -> None:
        while self._sessions:
            key, session = next(iter(self._sessions.items()))
            if session.expires > now:
                break
            self._sessions.popitem(last=False)
            self._bytes -= session.nbytes
            self._expired[key] = None
            while len(self._expired) > FORGOTTEN_SESSIONS:
                self._expired.popitem(last=False)

    def _session(self, key: tuple, create: bool = False) -> _Session | None:
        """The session `key` (refreshed: it lives resident_ttl_s from now), or None."""
        now = time.monotonic()
        self._expire(now)
        session = self._sessions.get(key)
        if session is None and create:
            session = self._sessions[key] = _Session()
            self._expired.pop(key, None)
        if session is not None:
            session.expires = now + self.limits.resident_ttl_s
            self._sessions.move_to_end(key)
        return session

    def _missing(self, key: tuple, handle: str, field: str) -> RequestError:
        why = (
            f"expired (unused for more than resident_ttl_s={self.limits.resident_ttl_s:g} s)"
            if key in self._expired
            else "unknown to this server (never uploaded in this session, freed, or lost when the server restarted)"
        )
        return RequestError(
            f"resident array {shown(handle)} is {why}: upload it again", node=handle, field=field, kind="not_found"
        )

    def get(self, key: tuple, handle: str, field: str = "resident") -> Resident:
        """The resident `handle` of session `key`; 404 naming it when there is none."""
        with self._lock:
            session = self._session(key)
            resident = None if session is None else session.arrays.get(handle)
            if resident is None:
                raise self._missing(key, handle, field)
            return resident

    def view(self, key: tuple, handle: str, field: str = "resident"):
        """A read-only view of the resident `handle`'s array (it holds the array: an update then steps a copy)."""
        with self._session_lock(key):
            view = self.get(key, handle, field).array.view()
        view.flags.writeable = False
        return view

    def updating(self, key: tuple):
        """The lock of session `key` (its updates one at a time; no view or fetch taken meanwhile)."""
        return self._session_lock(key)

    def _session_lock(self, key: tuple):
        with self._lock:
            session = self._sessions.get(key)
        return session.lock if session is not None else _NO_SESSION

    def check_after(self, key: tuple, after) -> None:
        """Refuse (409, naming update.after) a step that must follow step `after` of session `key` when that
        is not the last step the session applied (it failed, or has not arrived yet). Called with the
        session's lock held: when the step's inputs are read, and again when it is applied."""
        with self._lock:
            session = self._sessions.get(key)
            last = None if session is None else session.last_step
        if after is not None and session is not None and last != after:  # (no session: its handles say why)
            raise RequestError(
                f"this step must follow step {after} of the session, which the server has not applied (the last it "
                f"applied is {shown(last)}): step {after} failed or has not arrived; nothing was applied",
                field="update.after",
                kind="conflict",
            )

    def applied(self, key: tuple, step) -> None:
        """Session `key`'s last applied step is now `step` (an update's, None when it has none)."""
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                session.last_step = step

    def check_room(self, key: tuple, added: int, field: str = "upload") -> None:
        """Refuse (413, naming the bound) `added` more bytes for session `key`."""
        if added <= 0:
            return
        with self._lock:
            self._expire(time.monotonic())
            session = self._sessions.get(key)
            self._check_room(session.nbytes if session is not None else 0, added, field)

    def _check_room(self, session_bytes: int, added: int, field: str) -> None:
        for name, held, bound in (
            ("max_session_resident_bytes", session_bytes, self.limits.max_session_resident_bytes),
            ("max_resident_bytes", self._bytes, self.limits.max_resident_bytes),
        ):
            if added > 0 and held + added > bound:
                raise RequestError(
                    f"storing {added} more bytes of resident arrays would pass {name}={bound} "
                    f"({held} held): free some, or ask for a larger bound",
                    field=field,
                    kind="too_large",
                )

    def put(self, key: tuple, uploads: dict) -> None:
        """Store `uploads` for session `key`: {handle: array} (`_put`), and {"handle:name": array}, the
        optimizer state `name` of a handle (held, or uploaded with it), as `load_state_dict` sets it."""
        arrays = {h: a for h, a in uploads.items() if STATE_SEPARATOR not in h}
        if arrays:
            self._put(key, arrays)
        states = [(*name.split(STATE_SEPARATOR, 1), array) for name, array in uploads.items() if name not in arrays]
        for handle, name, array in states:
            resident = self.get(key, handle, "upload")
            before = resident.nbytes
            grown = int(array.nbytes) - (int(resident.state[name].nbytes) if name in resident.state else 0)
            self.check_room(key, grown)
            resident.state[name] = numpy.array(array, copy=True)
            self.recharge(key, resident, before)

    def _put(self, key: tuple, uploads: dict) -> None:
        """Store {handle: array} for session `key` (copies, writable; a handle stored again is replaced,
        its optimizer state dropped), all or none: 413 when they would pass a bound, 422 when one would
        change a held array's shape or dtype (free it first)."""
        with self._lock:
            session = self._session(key, create=True)
            for handle, array in uploads.items():
                held = session.arrays.get(handle)
                if held is not None and (held.array.shape != array.shape or held.array.dtype != array.dtype):
                    raise RequestError(
                        f"resident {shown(handle)} holds {held.array.dtype}{list(held.array.shape)}; an upload "
                        f"of {array.dtype}{list(array.shape)} under its handle would change it: free it first",
                        node=handle,
                        field="upload",
                    )
            old = sum(session.arrays[h].nbytes for h in uploads if h in session.arrays)
            added = sum(int(a.nbytes) for a in uploads.values()) - old
            try:
                self._check_room(session.nbytes, added, "upload")
            except RequestError:
                if not session.arrays:
                    del self._sessions[key]
                raise
            for handle, array in uploads.items():
                session.arrays[handle] = Resident(numpy.array(array, copy=True, order="C"))
            session.nbytes += added
            self._bytes += added

    def recharge(self, key: tuple, resident: Resident, before: int) -> None:
        """Count a resident whose optimizer state changed from `before` bytes to its current size
        (`wire.resident_update` checks the room first with `check_room`)."""
        delta = resident.nbytes - before
        with self._lock:
            session = self._sessions.get(key) if delta else None
            if session is not None and any(r is resident for r in session.arrays.values()):
                session.nbytes += delta
                self._bytes += delta

    def fetch(self, key: tuple, handles) -> dict:
        """{handle: a copy of its array} of session `key`; 404 naming the first unknown handle. A handle
        written "handle:*" asks for its optimizer state instead: {"handle:name": a copy of each array}."""
        fetched = {}
        with self._session_lock(key):
            self._fetch(key, handles, fetched)
        return fetched

    def _fetch(self, key: tuple, handles, fetched: dict) -> None:
        for handle in handles:
            if handle.endswith(STATE_SEPARATOR + "*"):
                base = handle[:-2]
                state = self.get(key, base, "fetch").state
                fetched.update({f"{base}{STATE_SEPARATOR}{name}": a.copy() for name, a in state.items()})
            else:
                fetched[handle] = self.get(key, handle, "fetch").array.copy()

    def free(self, key: tuple, handles) -> None:
        """Drop handles of session `key` (unknown ones are ignored: freeing twice is harmless)."""
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return
            for handle in handles:
                resident = session.arrays.pop(handle, None)
                if resident is not None:
                    session.nbytes -= resident.nbytes
                    self._bytes -= resident.nbytes
            if not session.arrays:
                del self._sessions[key]

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._bytes = 0
