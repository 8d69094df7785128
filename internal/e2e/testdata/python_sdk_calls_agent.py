#!/usr/bin/env python3
"""A test agent for internal/e2e/python_sdk_calls_test.go (what the Python SDK sends).

It registers itself as ``--agent-id`` (AGENTPLANE_URL, AGENTPLANE_ADMIN_KEY)
and answers according to the user's message:

- ``empty_state``: yields ``State("")`` and catches the SDK's refusal,
  then answers ``refused`` (``sent`` if the SDK let it through).

The SDK comes from PYTHONPATH (the repository's sdk/python).
"""

from __future__ import annotations

import argparse
import os
import threading

import agentplane


def handle(req: agentplane.Request):
    content = str(req.input_message.get("content", ""))
    if content == "empty_state":
        return _empty_state()
    return "unknown command " + content


def _empty_state():
    try:
        yield agentplane.State("")
        yield "sent"
    except ValueError:
        yield "refused"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent-id", required=True)
    args = ap.parse_args()
    server = agentplane.AgentServer(handle, port=0).start()
    res = agentplane.register(os.environ["AGENTPLANE_URL"], os.environ["AGENTPLANE_ADMIN_KEY"], args.agent_id, "SDK calls test agent", server.url,
                              rotate_key=True)
    server.agent_api_key = res["agent_api_key"]
    print(f"calls agent {args.agent_id} at {server.url}", flush=True)
    threading.Event().wait()  # serve (in the server's thread) until killed


if __name__ == "__main__":
    main()
