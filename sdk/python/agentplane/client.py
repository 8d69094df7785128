"""Calls from an agent to the platform (DESIGN §6)."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, List, Mapping, Optional

from .agents import Agents
from .errors import APIError, _retry_after, _unsendable
from .tools import Tools

__all__ = ["Client", "register", "ENV_URL", "ENV_AGENT_KEY"]

#: Environment variable naming the platform's base URL, e.g. ``http://127.0.0.1:8080``.
ENV_URL = "AGENTPLANE_URL"
#: Environment variable holding this agent's API key (issued by registration).
ENV_AGENT_KEY = "AGENTPLANE_AGENT_KEY"

_USER_AGENT = "agentplane-python/0.1"


class Client:
    """A client for the platform's agent-facing API.

    Every call sends ``Authorization: Bearer <agent_api_key>`` plus
    ``x-run-id`` and ``x-session-id`` when they are known, so the platform can
    attribute the call to a run (it refuses run ids that are not this
    agent's). Inside a handler use ``req.client``, which is already bound to
    the run; build one yourself for calls outside a run (heartbeats).
    ``client.tools`` calls tools in the bound run (:class:`agentplane.tools.Tools`);
    ``client.agents`` calls other agents from it (:class:`agentplane.agents.Agents`).

    ``base_url`` and ``agent_api_key`` default to the ``AGENTPLANE_URL`` and
    ``AGENTPLANE_AGENT_KEY`` environment variables. Failed calls raise
    :class:`agentplane.APIError`.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        agent_api_key: Optional[str] = None,
        run_id: Optional[str] = None,
        session_id: Optional[str] = None,
        *,
        agent_id: Optional[str] = None,
        timeout: float = 30.0,
        traceparent: Optional[str] = None,
    ) -> None:
        base_url = base_url or os.environ.get(ENV_URL)
        if not base_url:
            raise ValueError(f"no platform URL: pass base_url or set {ENV_URL}")
        self.base_url = base_url.rstrip("/")
        self.agent_api_key = agent_api_key if agent_api_key is not None else os.environ.get(ENV_AGENT_KEY, "")
        self.run_id = run_id or None
        self.session_id = session_id or None
        self.agent_id = agent_id or None
        self.timeout = timeout
        #: The W3C trace context sent with every call (and in
        #: ``openai_kwargs``' headers), so the platform's spans of this
        #: agent's LLM and tool calls join the run's trace. ``req.client``
        #: carries the traceparent the agent was invoked with; an agent with
        #: OpenTelemetry of its own sets its current span's (``bind(traceparent=...)``).
        self.traceparent = traceparent or None
        #: Tool calls in the bound run: ``client.tools.invoke(name, args)``.
        self.tools = Tools(self)
        #: Other agents, run as children of the bound run: ``client.agents.invoke(agent_id, message)``.
        self.agents = Agents(self)

    def __repr__(self) -> str:
        # Never print the key: reprs end up in logs and tracebacks.
        return f"Client(base_url={self.base_url!r}, agent_id={self.agent_id!r}, run_id={self.run_id!r}, session_id={self.session_id!r})"

    def bind(
        self,
        run_id: Optional[str] = None,
        session_id: Optional[str] = None,
        agent_id: Optional[str] = None,
        traceparent: Optional[str] = None,
    ) -> "Client":
        """Return a copy of this client attributed to another run/session/agent (or trace context)."""
        c = Client(
            self.base_url,
            self.agent_api_key,
            run_id if run_id is not None else self.run_id,
            session_id if session_id is not None else self.session_id,
            agent_id=agent_id if agent_id is not None else self.agent_id,
            timeout=self.timeout,
            traceparent=traceparent if traceparent is not None else self.traceparent,
        )
        # The copy is still the handler's (req.client.bind(traceparent=...)):
        # a child it follows must stop with the run, as one through
        # req.agents does, and keep the settings given to this one.
        a = self.agents
        c.agents = Agents(c, on_cancel=a._on_cancel)
        c.agents.read_timeout, c.agents.max_attempts, c.agents.retry_backoff = a.read_timeout, a.max_attempts, a.retry_backoff
        return c

    # -- attribution -------------------------------------------------------

    def headers(self) -> Dict[str, str]:
        """The attribution headers (``x-run-id``, ``x-session-id``, ``traceparent``) this client sends."""
        h: Dict[str, str] = {}
        if self.run_id:
            h["x-run-id"] = self.run_id
        if self.session_id:
            h["x-session-id"] = self.session_id
        if self.traceparent:
            h["traceparent"] = self.traceparent
        return h

    def openai_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments for an OpenAI SDK client pointed at the LLM proxy.

        ``OpenAI(**client.openai_kwargs())`` (or ``AsyncOpenAI``) sends every
        LLM call through the platform, authenticated with the agent key and
        attributed to this run.
        """
        return {
            "base_url": self.base_url + "/v1",
            "api_key": self.agent_api_key,
            "default_headers": self.headers(),
        }

    def mcp_config(self) -> Dict[str, Any]:
        """The platform's MCP server for this client's run: ``{"url", "headers"}``.

        Any MCP client library can call the run's tools through it
        (``tools/list``, ``tools/call`` with the platform's policy, approvals
        and deadlines; progress notifications while a call waits). The
        headers carry the agent key and the run; the session is bound to
        the run. With the ``mcp`` Python package::

            cfg = req.mcp_config()
            async with streamablehttp_client(cfg["url"], headers=cfg["headers"]) as (r, w, _):
                ...
        """
        headers = {"Authorization": f"Bearer {self.agent_api_key}"}
        headers.update(self.headers())
        return {"url": self.base_url + "/mcp", "headers": headers}

    # -- agent registry ----------------------------------------------------

    def heartbeat(self, agent_id: Optional[str] = None) -> Dict[str, Any]:
        """Tell the platform this agent is alive; returns ``{"ok": true}``."""
        agent_id = agent_id or self.agent_id
        if not agent_id:
            raise ValueError("heartbeat needs an agent_id (pass it or bind the client to one)")
        return self._call("POST", f"/v1/agents/{_seg(agent_id)}:heartbeat", body={})

    # -- transcript --------------------------------------------------------

    def messages(self, session_id: Optional[str] = None, limit: Optional[int] = None, before: Optional[str] = None) -> Dict[str, Any]:
        """One page of a session's transcript.

        Returns ``{"messages": [...], "next_before": ...}``: the newest
        ``limit`` messages (older than the message id ``before`` when given),
        oldest first within the page. Pass ``next_before`` back as
        ``before`` for the page before this one.
        ``session_id`` defaults to the bound session.
        """
        sid = self._session(session_id)
        query: Dict[str, Any] = {}
        if limit is not None:
            query["limit"] = int(limit)
        if before:
            query["before"] = before
        return self._call("GET", f"/v1/sessions/{_seg(sid)}/messages", query=query)

    def transcript(self, session_id: Optional[str] = None, page_size: int = 100) -> List[Dict[str, Any]]:
        """The whole transcript of a session, oldest first (pages through :meth:`messages`)."""
        pages: List[List[Dict[str, Any]]] = []
        before: Optional[str] = None
        while True:
            page = self.messages(session_id, limit=page_size, before=before)
            msgs = page.get("messages") or []
            pages.append(msgs)
            nxt = page.get("next_before")
            # Stop on an empty page or a cursor that does not move, so a
            # misbehaving server cannot loop us forever.
            if not msgs or not nxt or nxt == before:
                break
            before = nxt
        out: List[Dict[str, Any]] = []
        for msgs in reversed(pages):
            out.extend(msgs)
        return out

    def append_message(self, role: str, content: str, session_id: Optional[str] = None) -> Dict[str, Any]:
        """Append a message to a session's transcript; returns the stored message."""
        sid = self._session(session_id)
        return self._call("POST", f"/v1/sessions/{_seg(sid)}/messages", body={"role": role, "content": content})

    # -- context store -----------------------------------------------------

    def context_put(self, key: str, data: Any, if_version: Optional[int] = None) -> Dict[str, Any]:
        """Store a new version of a context blob; returns ``{key, version, created_at}``.

        With ``if_version`` the write succeeds only if the latest version is
        that number (0: the key must not exist yet); otherwise the platform
        answers 409 and this raises :class:`APIError` with ``status == 409``.
        """
        body: Dict[str, Any] = {"data": data}
        if if_version is not None:
            body["if_version"] = int(if_version)
        return self._call("PUT", f"/v1/context/{_seg(key)}", body=body)

    def context_get(self, key: str, version: Optional[int] = None) -> Dict[str, Any]:
        """Read a context blob (latest version unless ``version`` is given); returns ``{key, version, data, created_at}``."""
        query = {"version": int(version)} if version is not None else None
        return self._call("GET", f"/v1/context/{_seg(key)}", query=query)

    # -- plumbing ----------------------------------------------------------

    def _session(self, session_id: Optional[str]) -> str:
        sid = session_id or self.session_id
        if not sid:
            raise ValueError("no session_id: pass one or bind the client to a session")
        return sid

    def _call(
        self, method: str, path: str, *, body: Any = None, query: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None
    ) -> Any:
        headers = self.headers()
        if self.agent_api_key:
            headers["Authorization"] = "Bearer " + self.agent_api_key
        return _request(method, self.base_url + path, headers, body=body, query=query, timeout=self.timeout if timeout is None else timeout)


def register(
    base_url: Optional[str],
    admin_key: str,
    agent_id: str,
    name: str,
    endpoint: str,
    capabilities: Iterable[str] = (),
    linked_agents: Iterable[str] = (),
    rotate_key: bool = False,
    *,
    description: Optional[str] = None,
    sub_agent_echo: Optional[str] = None,
    a2a: bool = False,
    protocol: Optional[str] = None,
    timeout: float = 30.0,
) -> Dict[str, Any]:
    """Register (or update) an agent; returns ``{ok, agent_id, agent_api_key?}``.

    Needs the platform's admin key. ``agent_api_key`` is present only on the
    first registration of ``agent_id`` or when ``rotate_key`` is true: keep
    it, the platform stores only a hash. ``base_url`` defaults to
    ``AGENTPLANE_URL``. ``linked_agents`` are the agents this one may call
    (``req.agents.invoke`` or the ``call_<agent_id>`` tools);
    ``description`` is what it does (offered to models with its
    ``call_<agent_id>`` tool); ``sub_agent_echo`` (``aggregate``,
    ``passthrough`` or ``off``) is how its output reaches the user when it
    runs as a child. ``a2a=True`` also serves the agent over A2A at
    ``/a2a/{agent_id}``; ``protocol="a2a"`` registers a remote A2A agent
    (``endpoint`` is its card URL or base URL).
    """
    base_url = base_url or os.environ.get(ENV_URL)
    if not base_url:
        raise ValueError(f"no platform URL: pass base_url or set {ENV_URL}")
    body: Dict[str, Any] = {
        "agent_id": agent_id,
        "name": name,
        "endpoint": endpoint,
        "capabilities": list(capabilities),
    }
    linked = list(linked_agents)
    if linked:
        body["linked_agents"] = linked
    if description is not None:
        body["description"] = description
    if sub_agent_echo is not None:
        body["sub_agent_echo"] = sub_agent_echo
    if rotate_key:
        body["rotate_key"] = True
    if a2a:
        body["a2a"] = True
    if protocol is not None:
        body["protocol"] = protocol
    return _request(
        "POST",
        base_url.rstrip("/") + "/v1/agents/register",
        {"Authorization": "Bearer " + admin_key},
        body=body,
        timeout=timeout,
    )


def _seg(s: str) -> str:
    """Escape one path segment (ids and context keys may hold '/', ':' or spaces)."""
    return urllib.parse.quote(str(s), safe="")


def _request(
    method: str,
    url: str,
    headers: Dict[str, str],
    *,
    body: Any = None,
    query: Optional[Mapping[str, Any]] = None,
    timeout: float,
) -> Any:
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None
    hdrs = {"Accept": "application/json", "User-Agent": _USER_AGENT, **headers}
    if body is not None:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        hdrs["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status = resp.status
            raw = resp.read()
    except urllib.error.HTTPError as e:
        try:
            raw = e.read()
        except (OSError, http.client.HTTPException) as cut:
            raise APIError("connection_error", f"{method} {url}: HTTP {e.code} answer cut short: {cut!r}") from cut
        raise _api_error(e.code, raw, e.headers) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise APIError("connection_error", f"{method} {url}: {reason}") from e
    except http.client.HTTPException as e:
        # An answer cut short (IncompleteRead) or garbled is no answer, as
        # a reset is: the same error, retried where a reset is.
        raise APIError("connection_error", f"{method} {url}: {e!r}") from e
    except UnicodeEncodeError as e:
        raise _unsendable(method, url, e) from None
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise APIError("bad_response", f"{method} {url}: response is not JSON: {e}", status, raw) from None


def _api_error(status: int, raw: bytes, headers: Any = None) -> APIError:
    try:
        err = json.loads(raw)["error"]
        return APIError(str(err["code"]), str(err.get("message", "")), status, raw, retry_after=_retry_after(err, headers))
    except (ValueError, KeyError, TypeError):
        text = raw.decode("utf-8", "replace").strip()[:500]
        return APIError(f"http_{status}", text, status, raw, retry_after=_retry_after(None, headers))
