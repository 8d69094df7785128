"""Tool calls from an agent (DESIGN §6): invoke, then wait while pending.

``client.tools.invoke(name, args)`` sends ``POST /v1/tools/{name}:invoke``
and, while the call is ``pending`` (waiting for an approval, the user's
client or a slow tool), long-polls ``POST /v1/tool_calls/{id}:wait`` in
rounds of 30 s with a random 200-800 ms pause between rounds (seed 001 §2.1:
short rounds survive the 60 s idle timeout of common proxies; the jitter
keeps many agents woken together from polling in lockstep). ``:wait``
answers at once when the call ends, so the pause is only paid after a round
that timed out.

Each request is retried with the same idempotency key on connection errors
and 502/503/504, at most :data:`MAX_ATTEMPTS` times with a jittered,
doubling backoff; a 4xx is raised at once, as a :class:`ToolError`. The
platform answers a repeated key (within the run) with the call the first
request created, so a retry never runs a tool twice.

A 429 (``rate_limited``: the agent key's request rate, API.md "Rate
limits") is no answer about the call — the platform refused the request
before doing anything — so it is neither a failure nor counted against
:data:`MAX_ATTEMPTS`: the request is sent again once the wait the platform
named (``retry_after_ms``, else ``Retry-After``; else the backoff) is over,
for as long as the caller's ``timeout`` allows.
"""

from __future__ import annotations

import random
import secrets
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .errors import AgentError, APIError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Tools", "ToolError", "tool_name_from_function", "MAX_ATTEMPTS", "WAIT_TIMEOUT_MS", "WAIT_PAUSE"]

#: The long-poll each ``:wait`` round asks for, in milliseconds.
WAIT_TIMEOUT_MS = 30_000
#: Bounds of the random pause between two ``:wait`` rounds, in seconds.
WAIT_PAUSE: Tuple[float, float] = (0.2, 0.8)
#: How often one request (the invoke, or one ``:wait``) is sent at most when
#: it fails with a connection error or 502/503/504 (a 429 is not counted).
MAX_ATTEMPTS = 5
#: First retry backoff and its cap, in seconds; it doubles between attempts.
RETRY_BACKOFF: Tuple[float, float] = (0.1, 2.0)

# Extra socket time on top of what the platform may legitimately take to
# answer (an invoke waits up to 30 s for a fast server tool; a :wait round
# lasts its timeout_ms), so a slow answer is not mistaken for a dead one.
_SOCKET_SLACK = 15.0
_INVOKE_SERVER_WAIT = 30.0

_RETRY_STATUSES = (502, 503, 504)


class ToolError(AgentError, APIError):
    """Every failure of a tool call: the platform refused it, or it ended ``failed``.

    ``code`` is the platform's error code:

    - refused (a 4xx answer to the invoke or to a ``:wait``): the answer's
      code — ``invalid_args`` (the arguments do not match the tool's
      schema), ``tool_not_found``, ``forbidden``, ``run_not_active``…;
      ``status`` is the HTTP status;
    - ended failed: the lower-case state (``rejected``, ``blocked``,
      ``timeout``, ``expired``, ``cancelled``) or, for ``FAILED``, the cause
      (``client_offline``, ``tool_http_error``, ``tool_unreachable``,
      ``tool_protocol_error``, ``tool_error``, ``failed``); ``status`` is 0.

    ``state`` is the raw final state (``""`` for a refusal),
    ``tool_call_id`` the call, ``detail`` the error's detail object (or
    ``None``).

    One hierarchy: it is an :class:`APIError` (``except APIError`` still
    catches a refusal) and an :class:`AgentError` — a handler that lets it
    escape ends its run with the tool call's code, so an unhandled rejection
    reads as one. A platform still unreachable, or answering 5xx, after the
    retries raises a plain :class:`APIError` (the call may still be running);
    so does a 429 ``rate_limited`` whose wait the caller's timeout does not
    leave room for (its ``retry_after`` says how long).
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        tool_name: str = "",
        tool_call_id: str = "",
        state: str = "",
        detail: Any = None,
        approval_id: Optional[str] = None,
        status: int = 0,
        body: Optional[bytes] = None,
    ) -> None:
        # Both bases set the same attributes; neither __init__ is cooperative.
        Exception.__init__(self, f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.body = body
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.state = state
        self.detail = detail
        self.approval_id = approval_id

    def __str__(self) -> str:
        s = f"tool {self.tool_name} failed ({self.code})"
        if self.message:
            s += f": {self.message}"
        if self.status:
            s += f" (HTTP {self.status})"
        if self.tool_call_id:
            s += f" [tool call {self.tool_call_id}]"
        return s


def tool_name_from_function(function_name: str) -> str:
    """Map an OpenAI function name back to the tool name.

    ``"a__b"`` → ``"a.b"``; an MCP server's tool ``"{server}@{tool}"`` is
    spelt with ``"--"`` for the ``"@"``: ``"files--read__text"`` →
    ``"files@read.text"``. The platform accepts either spelling.
    """
    server, sep, tool = function_name.partition("--")
    if sep:
        return server + "@" + tool.replace("__", ".")
    return function_name.replace("__", ".")


def _jitter(lo: float, hi: float) -> float:
    """A uniformly random duration in ``[lo, hi]`` seconds."""
    if hi <= lo:
        return lo
    return random.uniform(lo, hi)


class Tools:
    """The tool calls of a :class:`Client`; reach it as ``client.tools``.

    The timing attributes (``wait_timeout_ms``, ``wait_pause``,
    ``max_attempts``, ``retry_backoff``) default to the module constants and
    may be changed per instance.
    """

    def __init__(self, client: "Client") -> None:
        self._client = client
        self.wait_timeout_ms = WAIT_TIMEOUT_MS
        self.wait_pause = WAIT_PAUSE
        self.max_attempts = MAX_ATTEMPTS
        self.retry_backoff = RETRY_BACKOFF

    def __repr__(self) -> str:
        return f"Tools({self._client!r})"

    def invoke(
        self,
        name: str,
        args: Optional[Dict[str, Any]] = None,
        idempotency_key: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        timeout: Optional[float] = None,
        *,
        on_pending: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> Any:
        """Call tool ``name`` with ``args`` in the bound run; return its result.

        - ``idempotency_key``: the platform answers the same key (within the
          run) with the same tool call. Default: a random key, drawn once
          per ``invoke`` and reused by every retry of it.
        - ``timeout_ms``: overrides the tool's execution timeout for this call
          (what the platform waits for the tool).
        - ``timeout``: seconds this method may take in all; when they run out
          it raises :class:`TimeoutError` naming the tool call, which keeps
          going on the platform (read it with :meth:`get`). Default: no limit.
        - ``on_pending``: called once with the invoke's answer (a dict with
          ``state``, ``approval_id``...) when the call does not end at once.

        Raises :class:`ToolError` for every failure of the call: the
        platform refused it (4xx: ``invalid_args``, ``tool_not_found``…) or
        it ended failed (``rejected``, ``timeout``…). A platform that stays
        unreachable or answers 5xx through every retry raises
        :class:`APIError`. A 429 ``rate_limited`` is waited out and sent
        again; one that asks for longer than ``timeout`` leaves raises
        :class:`APIError` with ``code == "rate_limited"``, ``status == 429``
        and ``retry_after`` (the call, if it was created, is still pending).
        """
        if not self._client.run_id:
            raise ValueError("tools.invoke needs a run: use req.client, or bind the client to a run")
        deadline = None if timeout is None else time.monotonic() + timeout
        body: Dict[str, Any] = {
            "run_id": self._client.run_id,
            "args": {} if args is None else args,
            "idempotency_key": idempotency_key or "idk_" + secrets.token_hex(16),
        }
        if timeout_ms is not None:
            body["timeout_ms"] = int(timeout_ms)
        try:
            view = self._retrying(
                "POST", f"/v1/tools/{_seg(name)}:invoke", body=body, server_wait=_INVOKE_SERVER_WAIT, deadline=deadline, what=f"tool {name}"
            )
        except APIError as e:
            raise _refused(name, "", e) from e
        if view.get("status") == "pending" and on_pending is not None:
            on_pending(view)
        while view.get("status") == "pending":
            call_id = view.get("tool_call_id")
            if not call_id:
                raise APIError("bad_response", f"tool {name}: pending answer without a tool_call_id")
            wait_ms = self.wait_timeout_ms
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _still_pending(name, view, timeout)
                wait_ms = max(1, min(wait_ms, int(left * 1000)))
            try:
                view = self._retrying(
                    "POST",
                    f"/v1/tool_calls/{_seg(call_id)}:wait",
                    query={"timeout_ms": wait_ms},
                    server_wait=wait_ms / 1000.0,
                    deadline=deadline,
                    what=f"tool {name}",
                )
            except TimeoutError:
                # The caller's timeout ran out while a :wait was in flight:
                # the call is still pending, as far as anyone knows.
                raise _still_pending(name, view, timeout) from None
            except APIError as e:
                raise _refused(name, str(call_id), e) from e
            if view.get("status") != "pending":
                break
            pause = _jitter(*self.wait_pause)
            if deadline is not None and time.monotonic() + pause >= deadline:
                raise _still_pending(name, view, timeout)
            time.sleep(pause)
        status = view.get("status")
        if status == "succeeded":
            return view.get("result")
        if status == "failed":
            raise _tool_error(name, view)
        raise APIError("bad_response", f"tool {name}: call {view.get('tool_call_id')}: unknown status {status!r}")

    def list(self) -> List[Dict[str, Any]]:
        """The tools this agent may call in the bound run, as OpenAI function tools.

        Each item is ``{"type": "function", "function": {"name",
        "description", "parameters"}}``, ready for a chat completion's
        ``tools``; names have ``.`` replaced by ``__`` (see
        :func:`tool_name_from_function`).
        """
        query = {"run_id": self._client.run_id} if self._client.run_id else None
        return list(self._client._call("GET", "/v1/tools", query=query).get("tools") or [])

    def get(self, tool_call_id: str) -> Dict[str, Any]:
        """A tool call's current view: ``{tool_call_id, tool_name, status, state, result?, error?, ...}``."""
        return self._client._call("GET", f"/v1/tool_calls/{_seg(tool_call_id)}")

    # -- plumbing ----------------------------------------------------------

    def _retrying(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Optional[Dict[str, Any]] = None,
        server_wait: float,
        deadline: Optional[float],
        what: str,
    ) -> Dict[str, Any]:
        backoff, cap = self.retry_backoff
        failures = 0
        while True:
            sock_timeout = server_wait + _SOCKET_SLACK
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what}: timed out")
                sock_timeout = min(sock_timeout, left)
            try:
                return self._client._call(method, path, body=body, query=query, timeout=sock_timeout)
            except APIError as e:
                if e.status == 429:
                    # Rate limited: the platform did nothing and named the
                    # wait; not a failure, so not counted. Sent again
                    # (:invoke with its key, :wait is a read) unless the
                    # caller's time runs out first: then the rate limit is
                    # what the caller learns, with its retry_after.
                    pause, backoff = _rate_limit_pause(e, backoff, cap)
                    if deadline is not None and time.monotonic() + pause >= deadline:
                        raise
                    time.sleep(pause)
                    continue
                failures += 1
                if deadline is not None and _transient(e) and time.monotonic() >= deadline:
                    # No answer because the caller's time ran out (the
                    # socket timeout is cut to the deadline): a timeout,
                    # not a connection failure.
                    raise TimeoutError(f"{what}: timed out") from e
                if failures >= self.max_attempts or not _transient(e):
                    raise
                pause = _jitter(backoff / 2, backoff)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
                backoff = min(backoff * 2, cap)


def _rate_limit_pause(e: APIError, backoff: float, cap: float) -> Tuple[float, float]:
    """How long to wait after the 429 ``e``, and the backoff after that.

    The wait the platform named, never less; up to a quarter more (at most
    a second), so agents turned away together do not come back together.
    Without one — or with a wait of 0, which would re-send at full speed —
    the usual jittered, doubling backoff.
    """
    if e.retry_after is not None and e.retry_after > 0:
        return e.retry_after + _jitter(0, min(e.retry_after / 4, 1.0)), backoff
    return _jitter(backoff / 2, backoff), min(backoff * 2, cap)


def _transient(e: APIError) -> bool:
    """No answer at all, or a gateway's 502/503/504: worth sending again."""
    return (e.status == 0 and e.code == "connection_error") or e.status in _RETRY_STATUSES


def _refused(name: str, tool_call_id: str, e: APIError) -> APIError:
    """A 4xx answer about a tool call as its :class:`ToolError`; anything else as it is.

    A 429 is no answer about the call (the request was turned away before
    any work): it stays an :class:`APIError`, saying which call it left
    pending.
    """
    if isinstance(e, ToolError) or not 400 <= e.status <= 499:
        return e
    if e.status == 429:
        where = f"tool {name}: call {tool_call_id} still pending" if tool_call_id else f"tool {name}"
        return APIError(e.code, f"{where}: {e.message}", e.status, e.body, retry_after=e.retry_after)
    return ToolError(e.code, e.message, tool_name=name, tool_call_id=tool_call_id, status=e.status, body=e.body)


def _tool_error(name: str, view: Dict[str, Any]) -> ToolError:
    err = view.get("error") or {}
    if not isinstance(err, dict):
        err = {}
    state = str(view.get("state") or "")
    code = str(err.get("code") or state.lower() or "failed")
    return ToolError(
        code,
        str(err.get("message") or ""),
        tool_name=str(view.get("tool_name") or name),
        tool_call_id=str(view.get("tool_call_id") or ""),
        state=state,
        detail=err.get("detail"),
        approval_id=view.get("approval_id"),
    )


def _still_pending(name: str, view: Dict[str, Any], timeout: Optional[float]) -> TimeoutError:
    return TimeoutError(f"tool {name}: call {view.get('tool_call_id')} still {view.get('state') or 'pending'} after {timeout}s")


def _seg(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")
