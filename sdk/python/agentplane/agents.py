"""Agents calling agents through the platform (DESIGN §11): the direct form.

``req.agents.invoke(agent_id, message)`` asks the platform to run another
agent as a **child run** of this run (``POST /v1/agents/{agent_id}:invoke``
with ``Accept: text/event-stream``) and returns an :class:`AgentCall`: iterate
it for the child's events as they happen, or call :meth:`AgentCall.text` /
:meth:`AgentCall.result` to wait for the end::

    call = req.agents.invoke("weather", "What's the weather in Paris?")
    for ev in call:                      # run_started, delta, state, ... done | error
        if ev.type == "delta":
            yield ev.text                # pass the child's words on as they come
    res = call.result()                  # {run_id, status, output, usage, total_usage, error}

The child belongs to the platform, not to this connection: when the stream
breaks (a proxy restarts, a socket times out) the call is sent again with the
same idempotency key, which attaches to the same child — never a second one —
and the platform replays the child's events from its first; the ones already
seen are skipped by their ``seq``. A 429 (``rate_limited``: the agent key's
request rate) is no refusal either: the call is sent again, with the same
key, once the wait the platform named is over. A child that failed or was
cancelled makes :meth:`AgentCall.result` and :meth:`AgentCall.text` raise
:class:`SubAgentError` with the child's code; so does a call the platform
refuses (``agent_not_linked``, ``agent_not_found``, ``max_depth_exceeded``…),
at :meth:`Agents.invoke` already.

The tool form needs nothing new: ``req.client.tools.invoke("call_weather",
{"message": "..."})`` is an ordinary tool call whose result is ``{output,
run_id, usage}``.
"""

from __future__ import annotations

import http.client
import json
import random
import secrets
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from .errors import AgentError, APIError, InputRequired, _retry_after, _unsendable
from .tools import _rate_limit_pause

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Agents", "AgentCall", "AgentEvent", "SubAgentError", "READ_TIMEOUT"]

#: Seconds a child's stream may stay silent before it is taken for dead and
#: attached again. The platform sends a keep-alive comment every 15 s, so
#: this is three missed ones.
READ_TIMEOUT = 45.0
#: How often the call is sent in a row without getting an event back, on
#: connection errors and 502/503/504, before giving up. A 429
#: (``rate_limited``) is not counted: it is sent again once the wait the
#: platform named is over.
MAX_ATTEMPTS = 5
#: First retry backoff and its cap, in seconds; it doubles between attempts.
RETRY_BACKOFF: Tuple[float, float] = (0.1, 2.0)

_RETRY_STATUSES = (502, 503, 504)
# The events that end a child's stream.
_TERMINAL = ("done", "error", "input_required")


class SubAgentError(AgentError, APIError):
    """A child run that failed or was cancelled, or a call the platform refused.

    - the child ended badly: ``code`` is the child's error code (its agent's
      own code, ``cancelled``, ``parent_ended``, ``platform_restarted``…),
      ``run_status`` is ``"FAILED"`` or ``"CANCELLED"``, ``status`` is 0 and
      ``result`` is the whole result dict;
    - refused (a 4xx answer to the invoke): the answer's code —
      ``agent_not_linked``, ``agent_not_found``, ``max_depth_exceeded``,
      ``run_not_active``, ``idempotency_conflict``…; ``status`` is the HTTP
      status and ``run_id`` is ``""``.

    It is an :class:`AgentError`, so a handler that lets it escape ends its
    own run with the child's code, and an :class:`APIError` (``except
    APIError`` still catches a refusal).
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        agent_id: str = "",
        run_id: str = "",
        run_status: str = "",
        status: int = 0,
        body: Optional[bytes] = None,
        result: Optional[Dict[str, Any]] = None,
    ) -> None:
        Exception.__init__(self, f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.body = body
        self.agent_id = agent_id
        self.run_id = run_id
        self.run_status = run_status
        self.result = result

    def __str__(self) -> str:
        s = f"agent {self.agent_id} failed ({self.code})"
        if self.message:
            s += f": {self.message}"
        if self.status:
            s += f" (HTTP {self.status})"
        if self.run_id:
            s += f" [run {self.run_id}]"
        return s


class AgentEvent:
    """One event of a child run, as the platform streams it to its caller.

    ``type`` is ``run_started``, ``delta``, ``state``, ``tool_request``,
    ``approval_required`` (notices: the session's user answers them),
    ``done`` or ``error``. ``run_id`` is the child, ``parent_run_id`` the
    caller's run, ``seq`` its place in the session's log; ``text`` is a
    delta's text (``""`` for other events). Every field the platform sent is
    in ``data`` and readable as ``event["field"]`` or ``event.get("field")``.
    """

    __slots__ = ("type", "data")

    def __init__(self, type: str, data: Dict[str, Any]) -> None:  # noqa: A002 - the event's name
        self.type = type
        self.data = data

    @property
    def run_id(self) -> str:
        return str(self.data.get("run_id") or "")

    @property
    def parent_run_id(self) -> str:
        return str(self.data.get("parent_run_id") or "")

    @property
    def seq(self) -> int:
        v = self.data.get("seq")
        return v if isinstance(v, int) else 0

    @property
    def text(self) -> str:
        v = self.data.get("text")
        return v if self.type == "delta" and isinstance(v, str) else ""

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __repr__(self) -> str:
        return f"AgentEvent({self.type!r}, {self.data!r})"


class Agents:
    """The agent calls of a :class:`Client`; reach it as ``req.agents`` or ``client.agents``.

    ``read_timeout``, ``max_attempts`` and ``retry_backoff`` default to the
    module constants and may be changed per instance.
    """

    def __init__(self, client: "Client", on_cancel: Optional[Callable[[Callable[[], None]], Callable[[], None]]] = None) -> None:
        self._client = client
        self._on_cancel = on_cancel
        self.read_timeout = READ_TIMEOUT
        self.max_attempts = MAX_ATTEMPTS
        self.retry_backoff = RETRY_BACKOFF

    def __repr__(self) -> str:
        return f"Agents({self._client!r})"

    def invoke(self, agent_id: str, message: Any, idempotency_key: Optional[str] = None) -> "AgentCall":
        """Run agent ``agent_id`` as a child of the bound run; return the call, already streaming.

        ``message`` is the child's input: a string, or a ``{"role": "user",
        "content": ...}`` dict. ``idempotency_key``: the same key within this
        run attaches to the same child, whatever its state (default: a random
        key, drawn once and reused by every re-attach of this call).

        Raises :class:`SubAgentError` when the platform refuses the call
        (``agent_not_linked``, ``agent_not_found``, ``max_depth_exceeded``…),
        and :class:`APIError` when it stays unreachable through the retries.
        """
        if not self._client.run_id:
            raise ValueError("agents.invoke needs a run: use req.agents, or bind the client to a run")
        if not agent_id:
            raise ValueError("agents.invoke needs an agent_id")
        if isinstance(message, dict):
            msg = {"role": message.get("role") or "user", "content": message.get("content", "")}
        else:
            msg = {"role": "user", "content": str(message)}
        key = idempotency_key or "idk_" + secrets.token_hex(16)
        call = AgentCall(self, str(agent_id), msg, key)
        call._open(first=True)
        return call


class AgentCall:
    """A child run being followed: iterate it for its events; :meth:`text` / :meth:`result` wait for the end.

    ``run_id`` is the child's run (known as soon as :meth:`Agents.invoke`
    returns), ``agent_id`` the agent called, ``idempotency_key`` the key that
    attaches to it again (pass it to another ``invoke`` to follow the same
    child later). An ``AgentCall`` is read once: events already yielded are
    not yielded again, but :meth:`result` is kept. ``attaches`` counts the
    streams opened for it: 1, plus one per re-attach after a broken stream.
    """

    def __init__(self, agents: Agents, agent_id: str, message: Dict[str, Any], idempotency_key: str) -> None:
        self._agents = agents
        self.agent_id = agent_id
        self.message = message
        self.idempotency_key = idempotency_key
        self.run_id = ""
        self.attaches = 0
        self._resp: Any = None
        self._last_seq = 0
        self._deltas: List[str] = []
        self._end: Optional[AgentEvent] = None
        self._result: Optional[Dict[str, Any]] = None
        self._closed = False
        self._unregister: Callable[[], None] = lambda: None

    def __repr__(self) -> str:
        return f"AgentCall(agent_id={self.agent_id!r}, run_id={self.run_id!r})"

    # -- the public surface --------------------------------------------------

    def __iter__(self) -> Iterator[AgentEvent]:
        while self._end is None:
            ev = self._next()
            if ev is None:
                return
            yield ev

    def events(self) -> Iterator[AgentEvent]:
        """The child's events, as :meth:`__iter__` gives them."""
        return iter(self)

    @property
    def done(self) -> bool:
        """True once the child's last event (``done`` or ``error``) was read."""
        return self._end is not None

    def result(self) -> Dict[str, Any]:
        """Wait for the child to end; return ``{run_id, status, output, usage, total_usage, error}``.

        ``status`` is ``"DONE"`` (``output`` is the child's whole answer) or
        ``"INPUT_REQUIRED"``: the child asked back, not a failure —
        ``question`` and ``detail`` say what; calling the agent again in
        this intention answers it. Raises :class:`SubAgentError` (with the
        child's code, and the result in ``.result``) when the child failed
        or was cancelled.
        """
        for _ in self:
            pass
        res = self._build_result()
        if res["status"] not in ("DONE", "INPUT_REQUIRED"):
            err = res.get("error") or {}
            raise SubAgentError(
                str(err.get("code") or res["status"].lower() or "failed"),
                str(err.get("message") or ""),
                agent_id=self.agent_id,
                run_id=self.run_id,
                run_status=res["status"],
                result=res,
            )
        return res

    def text(self) -> str:
        """Wait for the child to end and return its whole output.

        Raises :class:`SubAgentError` if it failed, and
        :class:`InputRequired` with its question if it asked back — a
        handler that lets it propagate asks the user the same question.
        """
        res = self.result()
        if res["status"] == "INPUT_REQUIRED":
            raise InputRequired(str(res.get("question") or "The agent needs more input."), res.get("detail"), run_id=self.run_id)
        return str(res.get("output") or "")

    def close(self) -> None:
        """Stop following the child (it goes on running on the platform)."""
        self._closed = True
        self._drop()

    def __enter__(self) -> "AgentCall":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------

    def _build_result(self) -> Dict[str, Any]:
        if self._result is not None:
            return self._result
        end = self._end
        if end is None:
            # Closed (or cancelled) before the end: say so, without guessing.
            raise SubAgentError("stream_closed", "the call was closed before the child ended", agent_id=self.agent_id, run_id=self.run_id)
        d = end.data
        if end.type == "input_required":
            res = {
                "run_id": self.run_id,
                "status": "INPUT_REQUIRED",
                "output": "",
                "usage": {},
                "total_usage": d.get("total_usage") if isinstance(d.get("total_usage"), dict) else {},
                "error": None,
                "question": str(d.get("question") or ""),
                "detail": d.get("detail"),
            }
            self._result = res
            return res
        if end.type == "done":
            status = str(d.get("status") or "DONE")
            out = d.get("output")
            res: Dict[str, Any] = {
                "run_id": self.run_id,
                "status": status,
                "output": out if isinstance(out, str) else "".join(self._deltas),
                "usage": d.get("usage") if isinstance(d.get("usage"), dict) else {},
                "total_usage": d.get("total_usage") if isinstance(d.get("total_usage"), dict) else {},
                "error": None,
            }
        else:
            code = str(d.get("code") or "failed")
            status = str(d.get("status") or ("CANCELLED" if code in ("cancelled", "parent_ended") else "FAILED"))
            res = {
                "run_id": self.run_id,
                "status": status,
                "output": "",
                "usage": {},
                "total_usage": d.get("total_usage") if isinstance(d.get("total_usage"), dict) else {},
                "error": {"code": code, "message": str(d.get("message") or "")},
            }
        self._result = res
        return res

    def _next(self) -> Optional[AgentEvent]:
        """The next event not seen yet, attaching again as often as needed; None once closed."""
        attempts = 0
        backoff, cap = self._agents.retry_backoff
        while not self._closed:
            if self._resp is None:
                try:
                    self._open(first=False)
                except APIError as e:
                    attempts += 1
                    if self._closed or attempts >= self._agents.max_attempts or not _transient(e):
                        raise
                    time.sleep(random.uniform(backoff / 2, backoff))
                    backoff = min(backoff * 2, cap)
                    continue
            try:
                ev = _read_event(self._resp)
            except (OSError, ValueError, AttributeError, http.client.HTTPException) as e:
                # The connection broke (or timed out, or was cut short):
                # attach again and skip what was seen. AttributeError: a
                # close() from another thread (the run was cancelled) raced
                # http.client closing the same response at the end of the
                # stream; that is the close, not a bug of the caller's.
                self._drop()
                if self._closed:
                    return None
                attempts += 1
                if attempts >= self._agents.max_attempts:
                    raise APIError("connection_error", f"agent {self.agent_id}: child run {self.run_id}: stream broke off: {e}") from e
                time.sleep(random.uniform(backoff / 2, backoff))
                backoff = min(backoff * 2, cap)
                continue
            if ev is None:
                # The stream ended without the child's end: attach again.
                self._drop()
                attempts += 1
                if self._closed:
                    return None
                if attempts >= self._agents.max_attempts:
                    raise APIError("connection_error", f"agent {self.agent_id}: child run {self.run_id}: stream ended before the child did")
                continue
            if ev.type == "error" and ev.seq == 0:
                # The platform's own note that it lost the log stream
                # (stream_failed): attaching again resumes it. Counted like
                # any broken stream, so a platform that keeps failing is not
                # re-invoked in a tight loop.
                self._drop()
                if self._closed:
                    return None
                attempts += 1
                if attempts >= self._agents.max_attempts:
                    cause = f"{ev.get('code') or 'stream_failed'}: {ev.get('message') or ''}"
                    raise APIError("connection_error", f"agent {self.agent_id}: child run {self.run_id}: stream broke off: {cause}")
                time.sleep(random.uniform(backoff / 2, backoff))
                backoff = min(backoff * 2, cap)
                continue
            if ev.seq and ev.seq <= self._last_seq:
                continue  # replayed after a re-attach: seen already
            if ev.seq:
                self._last_seq = ev.seq
            attempts, backoff = 0, self._agents.retry_backoff[0]
            if ev.type == "delta":
                self._deltas.append(ev.text)
            if ev.type in _TERMINAL:
                self._end = ev
                self._drop()
            return ev
        return None

    def _open(self, first: bool) -> None:
        """POST the invoke (again), with the same key; keep the open stream."""
        client = self._agents._client
        body = {"message": self.message, "idempotency_key": self.idempotency_key}
        headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            "User-Agent": "agentplane-python/0.1",
            **client.headers(),
        }
        if client.agent_api_key:
            headers["Authorization"] = "Bearer " + client.agent_api_key
        url = client.base_url + "/v1/agents/" + urllib.parse.quote(self.agent_id, safe="") + ":invoke"
        req = urllib.request.Request(url, data=json.dumps(body, separators=(",", ":")).encode("utf-8"), headers=headers, method="POST")
        backoff, cap = self._agents.retry_backoff
        failures = 0
        while True:
            try:
                resp = urllib.request.urlopen(req, timeout=self._agents.read_timeout)
                break
            except urllib.error.HTTPError as e:
                try:
                    raw = e.read()
                except (OSError, http.client.HTTPException):
                    raw = b""  # the answer's body broke off: its status still says what it was
                if e.code == 429:
                    # Rate limited (the agent key's request rate): the
                    # platform did nothing and named the wait. Not a
                    # refusal of the call, and not a failure (not
                    # counted); the same key attaches to the same child
                    # once the request is let through.
                    limited = _refused(self.agent_id, e.code, raw, e.headers)
                    if self._closed:
                        raise limited from None
                    pause, backoff = _rate_limit_pause(limited, backoff, cap)
                    time.sleep(pause)
                    if self._closed:
                        raise limited from None
                    continue
                failures += 1
                if e.code in _RETRY_STATUSES and first and failures < self._agents.max_attempts:
                    time.sleep(random.uniform(backoff / 2, backoff))
                    backoff = min(backoff * 2, cap)
                    continue
                raise _refused(self.agent_id, e.code, raw, e.headers) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                # HTTPException: an answer garbled or cut short is no answer.
                failures += 1
                if first and failures < self._agents.max_attempts:
                    time.sleep(random.uniform(backoff / 2, backoff))
                    backoff = min(backoff * 2, cap)
                    continue
                raise APIError("connection_error", f"POST {url}: {getattr(e, 'reason', e)}") from e
            except UnicodeEncodeError as e:
                raise _unsendable("POST", url, e) from None
        ctype = resp.headers.get("Content-Type") or ""
        if not ctype.startswith("text/event-stream"):
            raw = resp.read()
            resp.close()
            raise APIError("bad_response", f"POST {url}: expected text/event-stream, got {ctype!r}", resp.status, raw)
        self.run_id = resp.headers.get("x-child-run-id") or self.run_id
        self.attaches += 1
        self._resp = resp
        if self._agents._on_cancel is not None and first:
            # A cancelled run closes the stream, so a handler blocked on it
            # returns at once.
            self._unregister = self._agents._on_cancel(self.close)

    def _drop(self) -> None:
        resp, self._resp = self._resp, None
        if resp is not None:
            _shutdown(resp)
            try:
                resp.close()
            except Exception:  # closing a broken socket may raise; it is gone either way
                pass
        if self._end is not None or self._closed:
            unregister, self._unregister = self._unregister, lambda: None
            unregister()


def _shutdown(resp: Any) -> None:
    """Shut the response's socket down, so a read blocked on it in another thread returns."""
    try:
        sock = resp.fp.raw._sock
        sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # no socket left, or not this kind of response: nothing blocks on it
        pass


def _read_event(resp: Any) -> Optional[AgentEvent]:
    """Read one SSE event (comments skipped); None at the end of the stream."""
    event, data = "", []  # type: str, List[str]
    while True:
        raw = resp.readline()
        if not raw:
            return None
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if event or data:
                payload = json.loads("\n".join(data)) if data else {}
                if not isinstance(payload, dict):
                    payload = {"value": payload}
                return AgentEvent(event or str(payload.get("type") or "message"), payload)
            continue
        if line.startswith(":"):
            continue
        if line.startswith("event:"):
            event = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):].lstrip())


def _transient(e: APIError) -> bool:
    return (e.status == 0 and e.code == "connection_error") or e.status in _RETRY_STATUSES


def _refused(agent_id: str, status: int, raw: bytes, headers: Any = None) -> APIError:
    """A 4xx answer as :class:`SubAgentError`; anything else (a 429 too: the
    call was not refused, only not let through yet) as :class:`APIError`."""
    err: Any = None
    try:
        err = json.loads(raw)["error"]
        code, message = str(err["code"]), str(err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        err = None
        code, message = f"http_{status}", raw.decode("utf-8", "replace").strip()[:500]
    if 400 <= status <= 499 and status != 429:
        return SubAgentError(code, message, agent_id=agent_id, status=status, body=raw)
    return APIError(code, message, status, raw, retry_after=_retry_after(err, headers))
