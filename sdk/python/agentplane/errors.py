"""Error types shared by the agent server and the platform client."""

from __future__ import annotations

from typing import Any, Dict, Optional

__all__ = ["AgentError", "APIError", "InputRequired", "NotConfiguredError"]


class AgentError(Exception):
    """Raise from a handler to end the run with ``event: error {code, message}``.

    The code reaches the platform verbatim and fails the run with it, so pick
    a stable, machine-readable value (``"bad_input"``, ``"upstream_timeout"``).
    Any other exception ends the run with code ``agent_exception``.
    """

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class InputRequired(Exception):
    """End the agent's turn asking the user (DESIGN §12): ``yield`` it (or
    ``return`` or ``raise`` it) from a handler::

        def handle(req):
            if not city_in(req.input_message["content"]):
                yield agentplane.InputRequired("Which city?")
                return
            ...

    The platform gets ``event: input_required {question, detail?}`` and the
    run ends ``INPUT_REQUIRED`` — not a failure. The user's answer starts a
    new run that resumes this one (``req.resumes_run_id``) in the same
    intention (``req.intention_id``), with the question and the answer in
    its ``messages``. Nothing the handler yields after it is sent.

    :meth:`AgentCall.text` raises it when the called agent asked back
    (``run_id`` is then that child's run), so letting it propagate asks the
    user the child's question.
    """

    def __init__(self, question: str, detail: Optional[Dict[str, Any]] = None, run_id: str = "") -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("InputRequired needs a question")
        super().__init__(question)
        self.question = question
        self.detail = detail
        self.run_id = run_id

    def payload(self) -> Dict[str, Any]:
        p: Dict[str, Any] = {"question": self.question}
        if self.detail is not None:
            p["detail"] = self.detail
        return p


class APIError(Exception):
    """A platform call failed.

    ``status`` is the HTTP status, or 0 when no response arrived at all (the
    platform was unreachable, or its answer was cut short; ``code`` is then
    ``"connection_error"``) or nothing could be sent (``"invalid_request"``:
    a header value — the key, an id, the traceparent — that is not Latin-1).
    ``code`` and ``message`` come from the platform's
    ``{"error": {"code", "message"}}`` body; a body without that shape gets
    ``code = "http_<status>"`` and its text as the message.

    ``retry_after`` is how long, in seconds, the platform asked the caller
    to wait before sending again — a 429 ``rate_limited`` answer's
    ``retry_after_ms`` (or ``retry_after``, or its ``Retry-After`` header) —
    and ``None`` when it did not say.
    """

    # A class default, so subclasses that set their own attributes
    # (ToolError, SubAgentError) have it too.
    retry_after: Optional[float] = None

    def __init__(self, code: str, message: str, status: int = 0, body: Optional[bytes] = None, *, retry_after: Optional[float] = None) -> None:
        text = f"{code} (HTTP {status}): {message}" if status else f"{code}: {message}"
        if retry_after is not None:
            text += f" (retry after {retry_after:g}s)"
        super().__init__(text)
        self.code = code
        self.message = message
        self.status = status
        self.body = body
        self.retry_after = retry_after


class NotConfiguredError(RuntimeError):
    """The agent has no way to call the platform: its URL or this agent's key is missing.

    Raised by ``req.client`` and ``req.openai_kwargs()``. The message names
    exactly what to set: ``AGENTPLANE_URL`` (the platform, e.g.
    ``http://127.0.0.1:8080``) and ``AGENTPLANE_AGENT_KEY`` (the
    ``agent_api_key`` that registering the agent returned), or the
    ``platform_url=`` / ``agent_api_key=`` arguments of ``serve()`` and
    :class:`AgentServer`.
    """


def _retry_after(error: Any, headers: Any = None) -> Optional[float]:
    """The wait, in seconds, an error answer asks for, or None.

    ``error`` is the ``error`` object of the body: its ``retry_after_ms``
    (exact) wins over its ``retry_after`` (whole seconds); ``headers``, the
    answer's, give ``Retry-After`` (delta-seconds; the HTTP-date form is not
    used by the platform and is ignored).
    """
    if isinstance(error, dict):
        for key, scale in (("retry_after_ms", 1000.0), ("retry_after", 1.0)):
            v = error.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                return v / scale
    if headers is not None:
        v = str(headers.get("Retry-After") or "").strip()
        if v.isascii() and v.isdigit():
            return float(v)
    return None


def _unsendable(method: str, url: str, e: UnicodeEncodeError) -> APIError:
    """The error of a request http.client cannot send: it writes header values
    as Latin-1 and the URL as ASCII, so a key, id or traceparent outside them
    never leaves. Not transient: nothing is retried."""
    return APIError("invalid_request", f"{method} {url}: a header value or the URL holds characters HTTP cannot carry: {e}")
