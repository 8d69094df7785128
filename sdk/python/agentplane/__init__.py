"""agentplane agent SDK (standard library only, Python >= 3.9).

Serve an agent the platform can invoke, and call the platform back::

    import agentplane

    def handle(req):
        yield agentplane.State("thinking")
        yield "you said: " + req.input_message.get("content", "")

    agentplane.serve(handle, port=9001)

Inside a handler, ``req.client`` is a :class:`Client` bound to the run
(transcript, context store, heartbeats) and ``OpenAI(**req.openai_kwargs())``
sends LLM calls through the platform's proxy. ``req.client.tools.invoke(name,
args)`` calls a tool, waiting through approvals and client tools, and raises
:class:`ToolError` when the call fails.
"""

from .client import ENV_AGENT_KEY, ENV_URL, Client, register
from .errors import AgentError, APIError
from .server import CODE_AGENT_EXCEPTION, AgentServer, Request, State, serve
from .tools import ToolError, Tools, tool_name_from_function

__version__ = "0.1.0"

__all__ = [
    "AgentError",
    "AgentServer",
    "APIError",
    "CODE_AGENT_EXCEPTION",
    "Client",
    "ENV_AGENT_KEY",
    "ENV_URL",
    "Request",
    "State",
    "ToolError",
    "Tools",
    "register",
    "serve",
    "tool_name_from_function",
]
