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
:class:`ToolError` for every failure of the call. ``req.agents.invoke(agent_id,
message)`` runs another agent as a child run and streams its events
(:class:`AgentCall`: iterate it, or ``.text()`` / ``.result()``); a child that
failed raises :class:`SubAgentError`. ``yield agentplane.InputRequired("Which
city?")`` ends the turn asking the user; the answer resumes the intention
(``req.resumes_run_id``, ``req.intention_id``).

Both need the platform's URL and this agent's key, which registration
returns (``agentplane.register(...)["agent_api_key"]``, shown once): set
``AGENTPLANE_URL`` and ``AGENTPLANE_AGENT_KEY``, or pass ``platform_url=`` and
``agent_api_key=`` to :func:`serve`. Without them ``req.client`` raises
:class:`NotConfiguredError` naming what is missing.
"""

from .agents import AgentCall, AgentEvent, Agents, SubAgentError
from .client import ENV_AGENT_KEY, ENV_URL, Client, register
from .errors import AgentError, APIError, InputRequired, NotConfiguredError
from .server import CODE_AGENT_EXCEPTION, AgentServer, Request, State, serve
from .tools import ToolError, Tools, tool_name_from_function

__version__ = "0.1.0"

__all__ = [
    "AgentCall",
    "AgentError",
    "AgentEvent",
    "Agents",
    "AgentServer",
    "APIError",
    "CODE_AGENT_EXCEPTION",
    "Client",
    "InputRequired",
    "ENV_AGENT_KEY",
    "ENV_URL",
    "NotConfiguredError",
    "Request",
    "State",
    "SubAgentError",
    "ToolError",
    "Tools",
    "register",
    "serve",
    "tool_name_from_function",
]
