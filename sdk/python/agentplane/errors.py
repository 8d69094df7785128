"""Error types shared by the agent server and the platform client."""

from __future__ import annotations

from typing import Optional

__all__ = ["AgentError", "APIError", "NotConfiguredError"]


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


class APIError(Exception):
    """A platform call failed.

    ``status`` is the HTTP status, or 0 when no response arrived at all (the
    platform was unreachable; ``code`` is then ``"connection_error"``).
    ``code`` and ``message`` come from the platform's
    ``{"error": {"code", "message"}}`` body; a body without that shape gets
    ``code = "http_<status>"`` and its text as the message.
    """

    def __init__(self, code: str, message: str, status: int = 0, body: Optional[bytes] = None) -> None:
        super().__init__(f"{code} (HTTP {status}): {message}" if status else f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.body = body


class NotConfiguredError(RuntimeError):
    """The agent has no way to call the platform: its URL or this agent's key is missing.

    Raised by ``req.client`` and ``req.openai_kwargs()``. The message names
    exactly what to set: ``AGENTPLANE_URL`` (the platform, e.g.
    ``http://127.0.0.1:8080``) and ``AGENTPLANE_AGENT_KEY`` (the
    ``agent_api_key`` that registering the agent returned), or the
    ``platform_url=`` / ``agent_api_key=`` arguments of ``serve()`` and
    :class:`AgentServer`.
    """
