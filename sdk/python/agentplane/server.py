"""Serve an agent: ``POST /invoke`` answered as a server-sent event stream, ``GET /health``.

The platform calls ``/invoke`` once per run (DESIGN §5). Each call is served by
two threads: the connection thread writes events to the socket and watches it
for a disconnect, and a worker thread runs the handler. Splitting them is what
lets the server send keep-alives while the handler is busy and notice a
cancelled run while the handler is blocked.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import queue
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ._sse import KEEPALIVE, encode_event
from .agents import Agents
from .client import ENV_AGENT_KEY, ENV_URL, Client
from .errors import AgentError, InputRequired, NotConfiguredError

__all__ = ["AgentServer", "Request", "State", "serve", "CODE_AGENT_EXCEPTION"]

log = logging.getLogger("agentplane")

#: The error code sent when a handler raises anything but :class:`AgentError`.
CODE_AGENT_EXCEPTION = "agent_exception"

_DEFAULT_MAX_BODY = 32 << 20  # the body carries the whole transcript

# The platform refuses an SSE event over 1 MiB (agent_protocol_error) and
# fails the run. A character is at most 12 bytes of JSON (a non-BMP one as
# two \u escapes, when encode_event falls back to ASCII), so a delta of this
# many characters always fits; longer text is sent as several deltas.
_MAX_DELTA_CHARS = 64 << 10
# The platform keeps the first 4 KiB of an error's message; more could push
# the event past 1 MiB, which would replace the handler's code with
# agent_protocol_error.
_MAX_ERROR_MESSAGE_CHARS = 4 << 10


@dataclass(frozen=True)
class State:
    """Yield from a handler to send ``event: state {state, detail}``.

    Use it to show progress ("thinking", "searching") to the user.
    ``state`` must be a non-empty string (``ValueError`` otherwise).
    """

    state: str
    detail: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The platform fails the whole run (agent_protocol_error) on a state
        # event without a state name; refused here, where the handler can
        # still catch it, as InputRequired refuses an empty question.
        if not isinstance(self.state, str) or not self.state:
            raise ValueError(f"State needs a non-empty state name, got {self.state!r}")


class Request:
    """One invocation of the agent, as the platform sent it.

    Attributes: ``agent_id``, ``session_id``, ``run_id``, ``parent_run_id``
    (``""`` for a root run; set when another agent called this one),
    ``depth`` (0 for a root run, the caller's depth plus one for a child),
    ``intention_id`` (the user intention the run belongs to) and
    ``resumes_run_id`` (``""``, or the run whose question — see
    :class:`InputRequired` — this run's input answers),
    ``user_id``, ``traceparent`` (``""`` if absent),
    ``input_message`` (``{"role", "content"}``), ``messages`` (the
    transcript the platform chose to send, a list of ``{"role", "content"}``
    dicts ready for an OpenAI call), ``context`` (the raw context object),
    ``headers`` (case-insensitive), ``body`` (the decoded JSON body) and
    ``client`` (a :class:`Client` bound to this run; without a platform URL
    and agent key reading it raises :class:`NotConfiguredError` saying what
    to set — ``has_client`` tells without raising) and ``agents`` (other
    agents, called as child runs of this one: ``req.agents.invoke(agent_id,
    message)``, see :mod:`agentplane.agents`).

    Set ``usage`` to a JSON-serialisable dict to report it in ``done``.
    """

    def __init__(self, body: Dict[str, Any], headers: Any, client: Optional[Client], missing: str = "") -> None:
        ctx = body.get("context")
        ctx = ctx if isinstance(ctx, dict) else {}
        self.body = body
        self.headers = headers
        self.agent_id: str = _str(body.get("agent_id"))
        # The body is the contract; the headers are a fallback that lets a
        # hand-written curl call still produce attributable client calls.
        self.session_id: str = _str(body.get("session_id")) or _str(headers.get("x-session-id"))
        self.run_id: str = _str(body.get("run_id")) or _str(headers.get("x-run-id"))
        self.parent_run_id: str = _str(body.get("parent_run_id"))
        self.intention_id: str = _str(body.get("intention_id"))
        self.resumes_run_id: str = _str(body.get("resumes_run_id"))
        depth = body.get("depth")
        self.depth: int = depth if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0 else 0
        im = body.get("input_message")
        self.input_message: Dict[str, Any] = im if isinstance(im, dict) else {}
        msgs = body.get("messages")
        self.messages: List[Dict[str, Any]] = list(msgs) if isinstance(msgs, list) else []
        self.context: Dict[str, Any] = ctx
        self.user_id: str = _str(ctx.get("user_id"))
        self.traceparent: str = _str(headers.get("traceparent"))
        self._client: Optional[Client] = client.bind(self.run_id, self.session_id, self.agent_id, self.traceparent) if client else None
        if self._client is not None:
            # A child the handler is following stops with the run.
            self._client.agents = Agents(self._client, on_cancel=self._on_cancel)
        self._missing = missing
        self.usage: Optional[Dict[str, Any]] = None
        self._cancel = threading.Event()
        self._cancel_lock = threading.Lock()
        self._cancel_hooks: List[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"Request(agent_id={self.agent_id!r}, run_id={self.run_id!r}, session_id={self.session_id!r})"

    @property
    def cancelled(self) -> bool:
        """True once the platform has closed the request (run cancelled) or the server is stopping."""
        return self._cancel.is_set()

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on cancellation; returns :attr:`cancelled`.

        Use it instead of ``time.sleep`` so a cancelled run stops at once:
        ``if req.wait_cancelled(0.05): return``.
        """
        return self._cancel.wait(timeout)

    @property
    def client(self) -> Client:
        """A :class:`Client` bound to this run: tools, transcript, context store.

        Raises :class:`NotConfiguredError` naming what is missing when the
        server was given no platform URL or no agent key (an agent that is
        never configured would otherwise fail later, and less clearly).
        """
        if self._client is None:
            raise NotConfiguredError(self._missing or _not_configured(None, None))
        return self._client

    @property
    def agents(self) -> Agents:
        """Other agents, run as children of this run: ``req.agents.invoke(agent_id, message)``.

        The same as ``req.client.agents``: raises :class:`NotConfiguredError`
        without a platform URL and agent key. The agent may call only the
        agents in its ``linked_agents``.
        """
        return self.client.agents

    @property
    def has_client(self) -> bool:
        """Whether :attr:`client` is available (the platform URL and agent key are known)."""
        return self._client is not None

    def openai_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments for ``OpenAI(...)``: the platform's LLM proxy, this agent's key and this run's ids."""
        return self.client.openai_kwargs()

    def mcp_config(self) -> Dict[str, Any]:
        """The platform's MCP server for this run: ``{"url", "headers"}`` (see :meth:`Client.mcp_config`)."""
        return self.client.mcp_config()

    def _set_cancelled(self) -> None:
        with self._cancel_lock:
            if self._cancel.is_set():
                return
            self._cancel.set()
            hooks, self._cancel_hooks = self._cancel_hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook must not keep the others from running
                log.debug("cancel hook failed", exc_info=True)

    def _on_cancel(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` on cancellation (now, if already cancelled); returns an unregister function."""
        with self._cancel_lock:
            if not self._cancel.is_set():
                self._cancel_hooks.append(hook)

                def unregister() -> None:
                    with self._cancel_lock:
                        if hook in self._cancel_hooks:
                            self._cancel_hooks.remove(hook)

                return unregister
        hook()
        return lambda: None


Handler = Callable[[Request], Any]


class AgentServer:
    """An HTTP server for one agent handler.

    The socket is bound in the constructor, so :attr:`port` is known before
    serving: bind on port 0, register the endpoint with the platform, then
    :meth:`start` (background thread) or :meth:`serve_forever`.

    ``handler(req)`` may return ``None``, a ``str`` (sent as a delta; a
    long one as several, so no event passes the platform's 1 MiB bound) or
    an iterable — typically it is a generator — of ``str`` (deltas) and
    :class:`State` items; ``async def`` handlers and async generators work
    too. A generator's ``return`` value counts as its last item. The stream
    then ends with ``done {usage: req.usage}``. Raising
    :class:`AgentError` ends it with that code; any other exception with
    ``agent_exception``.

    When the platform closes the request (the run was cancelled) the
    request is marked :attr:`Request.cancelled`, a generator is closed at its
    next ``yield`` (its ``finally`` blocks run) and an async handler's task
    is cancelled.

    ``platform_url`` and ``agent_api_key`` default to ``AGENTPLANE_URL`` and
    ``AGENTPLANE_AGENT_KEY``; they may be set as attributes later (after
    registering). ``keepalive_interval`` is how long the stream may stay
    silent before a ``: keep-alive`` comment is sent.
    """

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        platform_url: Optional[str] = None,
        agent_api_key: Optional[str] = None,
        keepalive_interval: float = 15.0,
        max_body_bytes: int = _DEFAULT_MAX_BODY,
    ) -> None:
        self.handler = handler
        self.platform_url: Optional[str] = platform_url or os.environ.get(ENV_URL) or None
        self.agent_api_key: Optional[str] = agent_api_key or os.environ.get(ENV_AGENT_KEY) or None
        self.keepalive_interval = keepalive_interval
        self.max_body_bytes = max_body_bytes
        self._httpd = _HTTPServer((host, port), _RequestHandler)
        self._httpd.agent = self
        self._thread: Optional[threading.Thread] = None
        self._serving = False
        self._stopped = False
        self._loop_done = threading.Event()
        self._loop_ident: Optional[int] = None
        # Wakes the accept loop on stop(), so stopping is immediate instead
        # of waiting out socketserver's 0.5 s shutdown poll.
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._streams: Set["_Pump"] = set()

    @property
    def host(self) -> str:
        """The bound host address."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` of this server: the endpoint to register."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> "AgentServer":
        """Serve in a daemon thread and return at once."""
        with self._lock:
            if self._serving or self._stopped:
                raise RuntimeError("server already started or stopped")
            self._serving = True
            self._thread = threading.Thread(target=self._loop, name=f"agentplane-server-{self.port}", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` is called (from another thread or a signal handler)."""
        with self._lock:
            if self._serving or self._stopped:
                raise RuntimeError("server already started or stopped")
            self._serving = True
        self._loop()

    def _loop(self) -> None:
        self._loop_ident = threading.get_ident()
        httpd = self._httpd
        # handle_request() then never blocks: it is only called once the
        # listening socket is readable, and returns if the client has gone.
        httpd.timeout = 0
        sel = selectors.DefaultSelector()
        try:
            sel.register(httpd.socket, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopped:
                ready = sel.select()
                if self._stopped:
                    break
                if any(key.fileobj is httpd.socket for key, _ in ready):
                    httpd.handle_request()
        finally:
            sel.close()
            self._close()
            self._loop_done.set()

    def stop(self) -> None:
        """Stop serving, cancel in-flight runs and close the socket. Safe to call twice.

        May be called from any thread, including a signal handler running in
        the thread that is inside :meth:`serve_forever`.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            serving, streams = self._serving, list(self._streams)
        for s in streams:
            s.abort()
        if not serving:
            self._close()
            return
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the loop already ended (Ctrl-C) and closed it
            pass
        if self._loop_ident != threading.get_ident():
            # The loop closes the socket on its way out; waiting for it
            # means the port is free when stop() returns.
            self._loop_done.wait()

    def _close(self) -> None:
        self._httpd.server_close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> "AgentServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _client(self) -> Optional[Client]:
        if not self.platform_url or not self.agent_api_key:
            return None
        return Client(self.platform_url, self.agent_api_key)

    def _track(self, pump: "_Pump", add: bool) -> bool:
        with self._lock:
            if add:
                if self._stopped:
                    return False
                self._streams.add(pump)
            else:
                self._streams.discard(pump)
        return True


def serve(handler: Handler, host: str = "127.0.0.1", port: int = 0, **kwargs: Any) -> None:
    """Serve ``handler`` until interrupted (Ctrl-C). Keyword arguments go to :class:`AgentServer`.

    Prints the bound URL to stderr (the only way to learn it with port 0).
    For a server running in the background, or to learn the port before
    serving, use :class:`AgentServer`.
    """
    server = AgentServer(handler, host, port, **kwargs)
    print(f"agentplane: agent listening on {server.url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


# -- HTTP plumbing -----------------------------------------------------------


# A client that goes away mid-request: the platform cancelling a run or
# dropping a pooled connection, a health checker giving up. Normal operation.
_DISCONNECTS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    agent: AgentServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr for every exception a
        # request raises; a client's disconnect is not worth one (it reads
        # as a crash in the agent's logs), so it goes to the debug log.
        # Anything else keeps the default: it is a bug worth seeing.
        exc = sys.exc_info()[1]
        if isinstance(exc, _DISCONNECTS):
            log.debug("connection from %s closed by the client: %r", client_address, exc)
            return
        super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 so the stream can be chunked and the platform can reuse the
    # connection for the next run.
    protocol_version = "HTTP/1.1"
    server_version = "agentplane-python/0.1"
    # Events are small writes; with Nagle's algorithm each one waits for the
    # ACK of the previous, which the client delays by up to 40 ms.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        if self._path() == "/health":
            self._json(200, {"ok": True})
        elif self._path() == "/invoke":
            self._error(405, "method_not_allowed", "use POST /invoke", allow="POST")
        else:
            self._error(404, "not_found", f"no route for GET {self._path()}")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        if self._path() == "/invoke":
            self._invoke()
        elif self._path() == "/health":
            self._error(405, "method_not_allowed", "use GET /health", allow="GET, HEAD")
        else:
            self._error(404, "not_found", f"no route for POST {self._path()}")

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _invoke(self) -> None:
        agent = self.server.agent
        try:
            body = json.loads(self._read_body(agent.max_body_bytes))
        except _BodyTooLarge:
            self._error(413, "payload_too_large", f"body exceeds {agent.max_body_bytes} bytes")
            return
        except (ValueError, UnicodeDecodeError) as e:
            self._error(400, "bad_request", f"body is not valid JSON: {e}")
            return
        if not isinstance(body, dict):
            self._error(400, "bad_request", "body must be a JSON object")
            return
        req = Request(body, self.headers, agent._client(), _not_configured(agent.platform_url, agent.agent_api_key))
        pump = _Pump(self.connection, self.wfile, agent.keepalive_interval, req._set_cancelled)
        if not agent._track(pump, True):
            pump.close()
            self._error(503, "shutting_down", "agent server is stopping")
            return
        try:
            self.send_response(200)
            # Exactly this media type: SSE is UTF-8 by definition, and a strict
            # check on the platform side must not trip over a parameter.
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            # Reverse proxies (nginx) buffer responses unless told not to,
            # which would hold every delta back.
            self.send_header("X-Accel-Buffering", "no")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            worker = threading.Thread(
                target=_drive, args=(agent.handler, req, pump), name=f"agentplane-run-{req.run_id or '?'}", daemon=True
            )
            worker.start()
            if not pump.run():
                # Mid-stream failure: the connection is in an unknown state.
                self.close_connection = True
        except OSError:
            req._set_cancelled()
            self.close_connection = True
        finally:
            agent._track(pump, False)
            pump.close()

    def _read_body(self, limit: int) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked(limit)
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0:
            raise ValueError(f"bad Content-Length {n}")  # read(-1) would wait for EOF
        if n > limit:
            self.close_connection = True  # the unread body would poison the next request
            raise _BodyTooLarge()
        return self.rfile.read(n)

    def _read_chunked(self, limit: int) -> bytes:
        parts: List[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Trailers, up to the blank line.
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            total += size
            if total > limit:
                self.close_connection = True
                raise _BodyTooLarge()
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)  # CRLF after the chunk

    def _json(self, status: int, obj: Any, allow: Optional[str] = None) -> None:
        raw = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if allow:
            self.send_header("Allow", allow)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def _error(self, status: int, code: str, message: str, allow: Optional[str] = None) -> None:
        self._json(status, {"error": {"code": code, "message": message}}, allow)


class _BodyTooLarge(Exception):
    pass


class _Pump:
    """Writes one run's events to the connection, in order, flushing each.

    The worker thread calls :meth:`put`; the connection thread sits in
    :meth:`run`, woken by the worker (through a socket pair), by the peer
    closing the connection, or by the keep-alive deadline — no polling.
    """

    def __init__(self, sock: socket.socket, wfile: Any, keepalive: float, on_cancel: Callable[[], None]) -> None:
        self._sock = sock
        self._wfile = wfile
        self._keepalive = keepalive
        self._on_cancel = on_cancel
        self._q: "queue.SimpleQueue[Tuple[bytes, bool]]" = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        # Non-blocking: if the wake buffer is full a wake-up is already
        # pending, and put() must never block the handler.
        self._wake_w.setblocking(False)
        self._lock = threading.Lock()
        self._closed = False
        self._aborted = False

    def put(self, chunk: bytes, terminal: bool = False) -> None:
        """Queue an encoded event for writing (any thread). Dropped once the stream is over."""
        with self._lock:
            if self._closed:
                return
            self._q.put((chunk, terminal))
            self._wake()

    def abort(self) -> None:
        """End the stream without a terminal event (server stopping)."""
        with self._lock:
            self._aborted = True
            if not self._closed:
                self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass

    def run(self) -> bool:
        """Write events until the terminal one; False if the peer went away or the server stopped first."""
        sel = selectors.DefaultSelector()
        try:
            sel.register(self._wake_r, selectors.EVENT_READ)
            sel.register(self._sock, selectors.EVENT_READ)
            last_write = time.monotonic()
            while True:
                timeout = None
                if self._keepalive and self._keepalive > 0:
                    timeout = max(0.0, self._keepalive - (time.monotonic() - last_write))
                ready = {key.fileobj for key, _ in sel.select(timeout)}
                # Drain the wake-ups before looking at _aborted: abort() may
                # land between the two, and a wake-up drained after the check
                # would be lost, leaving the stream asleep until keep-alive.
                if self._wake_r in ready:
                    self._wake_r.recv(4096)
                if self._aborted:
                    self._on_cancel()
                    return False
                if self._sock in ready:
                    if _peer_closed(self._sock):
                        log.debug("platform closed the invoke request; cancelling the run")
                        self._on_cancel()
                        return False
                    # Bytes after the request (pipelining) are not a close;
                    # stop watching so select does not spin on them.
                    sel.unregister(self._sock)
                wrote = False
                while True:
                    try:
                        chunk, terminal = self._q.get_nowait()
                    except queue.Empty:
                        break
                    self._write(chunk)
                    wrote = True
                    if terminal:
                        self._wfile.write(b"0\r\n\r\n")
                        self._wfile.flush()
                        return True
                if not wrote and not ready:
                    self._write(KEEPALIVE)
                    wrote = True
                if wrote:
                    last_write = time.monotonic()
        except OSError:
            # BrokenPipe / ConnectionReset: the platform is gone.
            self._on_cancel()
            return False
        finally:
            sel.close()

    def _write(self, chunk: bytes) -> None:
        # One write per event, in chunked framing; wfile is unbuffered, so
        # this reaches the socket now (the flush is for other wfile types).
        self._wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self._wfile.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake_r.close()
            self._wake_w.close()


def _peer_closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _not_configured(platform_url: Optional[str], agent_api_key: Optional[str]) -> str:
    """What an agent without a platform client must set, naming only what is missing."""
    missing = []
    if not platform_url:
        missing.append(f"{ENV_URL} (the platform, e.g. http://127.0.0.1:8080)")
    if not agent_api_key:
        missing.append(f"{ENV_AGENT_KEY} (this agent's key: the agent_api_key that POST /v1/agents/register or agentplane.register() returned)")
    if not missing:
        return ""
    return (
        "req.client needs the platform's URL and this agent's key; set "
        + " and ".join(missing)
        + ", or pass platform_url=... and agent_api_key=... to agentplane.serve() / AgentServer"
    )


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _bounded(s: Any, n: int) -> Any:
    """``s`` cut to ``n`` characters, marked with an ellipsis (non-strings as they are)."""
    if isinstance(s, str) and len(s) > n:
        return s[:n] + "…"
    return s


# -- running the handler (worker thread) -------------------------------------


def _drive(handler: Handler, req: Request, pump: _Pump) -> None:
    """Run ``handler`` and send its events; always sends exactly one terminal event."""
    emit = _Emitter(pump)
    try:
        result = handler(req)
        if inspect.isasyncgen(result) or inspect.isawaitable(result):
            result = _run_async(result, req, emit)
        if result is None:
            pass
        elif isinstance(result, (str, State, InputRequired)):
            emit.item(result)
        elif isinstance(result, (bytes, dict)) or not hasattr(result, "__iter__"):
            raise TypeError(f"handler returned {type(result).__name__}; want str, State, InputRequired, None or an iterable of them")
        else:
            _drain(iter(result), req, emit)
        emit.terminal("done", {"usage": req.usage if req.usage is not None else {}})
    except InputRequired as e:
        emit.terminal("input_required", e.payload())
    except AgentError as e:
        emit.terminal("error", {"code": e.code, "message": e.message})
    except Exception as e:
        if not req.cancelled:
            log.exception("agent handler failed (run_id=%s session_id=%s)", req.run_id, req.session_id)
        emit.terminal("error", {"code": CODE_AGENT_EXCEPTION, "message": f"{type(e).__name__}: {e}"})
    finally:
        # BaseException (SystemExit, a stray CancelledError) still owes the
        # platform a terminal event, or it would wait for one forever.
        emit.terminal("error", {"code": CODE_AGENT_EXCEPTION, "message": "handler exited without a result"})


def _drain(it: Any, req: Request, emit: "_Emitter") -> None:
    try:
        while True:
            try:
                item = next(it)
            except StopIteration as stop:
                # A generator's `return value` is its last word: `return
                # InputRequired(...)` (or a final str) must not be dropped
                # and the run reported done.
                if stop.value is not None and not req.cancelled:
                    emit.item(stop.value)
                return
            if req.cancelled:
                break
            emit.item(item)
            if emit.ended:
                break  # InputRequired ended the turn
    finally:
        # Closing raises GeneratorExit at the generator's yield, so its
        # finally blocks release what they hold (LLM streams, files).
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _run_async(obj: Any, req: Request, emit: "_Emitter") -> Any:
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def cancel() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # loop already closed: nothing left to cancel
                pass

        unregister = req._on_cancel(cancel)
        try:
            if not inspect.isasyncgen(obj):
                return await obj
            try:
                async for item in obj:
                    if req.cancelled:
                        break
                    emit.item(item)
                    if emit.ended:
                        break
            finally:
                await obj.aclose()
            return None
        finally:
            unregister()

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if req.cancelled:
            return None  # nobody is listening; the terminal event is dropped
        raise


class _Emitter:
    """Encodes handler output in the worker thread, so a bad value becomes an error event there."""

    def __init__(self, pump: _Pump) -> None:
        self._pump = pump
        self._done = False

    @property
    def ended(self) -> bool:
        return self._done

    def item(self, item: Any) -> None:
        if self._done:
            return
        if isinstance(item, InputRequired):
            self.terminal("input_required", item.payload())
            return
        if isinstance(item, str):
            # An empty delta tells the user nothing; a long one is split so
            # no event passes the platform's 1 MiB bound.
            for i in range(0, len(item), _MAX_DELTA_CHARS):
                self._pump.put(encode_event("delta", {"text": item[i : i + _MAX_DELTA_CHARS]}))
        elif isinstance(item, State):
            self._pump.put(encode_event("state", {"state": item.state, "detail": item.detail if item.detail is not None else {}}))
        else:
            raise TypeError(f"handler yielded {type(item).__name__}; want str, agentplane.State or agentplane.InputRequired")

    def terminal(self, event: str, data: Dict[str, Any]) -> None:
        if self._done:
            return
        if event == "error":
            data = {"code": data.get("code"), "message": _bounded(data.get("message"), _MAX_ERROR_MESSAGE_CHARS)}
        try:
            chunk = encode_event(event, data)
        except (TypeError, ValueError) as e:
            chunk = encode_event("error", {"code": CODE_AGENT_EXCEPTION, "message": f"{event} payload is not JSON-serialisable: {e}"})
        self._done = True
        self._pump.put(chunk, terminal=True)
