#!/usr/bin/env python3
"""A test agent that asks back with the Python SDK (internal/e2e/input_test.go).

It registers itself as ``--agent-id`` (AGENTPLANE_URL, AGENTPLANE_ADMIN_KEY)
and answers: without ``req.resumes_run_id`` it streams a delta and yields
``agentplane.InputRequired("Which city?", detail={...})`` — and one more
delta the platform must never get; answering its own question it says the
weather in the city the user named, with the intention it was given. The SDK
comes from PYTHONPATH (the repository's sdk/python).
"""

from __future__ import annotations

import argparse
import os
import threading

import agentplane


def handle(req: agentplane.Request):
    if not req.resumes_run_id:
        yield "Let me check. "
        yield agentplane.InputRequired("Which city?", detail={"choices": ["Paris", "Oslo"], "intention_id": req.intention_id})
        yield "never sent"
        return
    city = str(req.input_message.get("content", "")).strip()
    yield f"Sunny in {city} (intention {req.intention_id}, answering {req.resumes_run_id})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent-id", required=True)
    args = ap.parse_args()
    server = agentplane.AgentServer(handle, port=0).start()
    res = agentplane.register(os.environ["AGENTPLANE_URL"], os.environ["AGENTPLANE_ADMIN_KEY"], args.agent_id, "Ask agent", server.url, rotate_key=True)
    server.agent_api_key = res["agent_api_key"]
    print(f"ask agent {args.agent_id} at {server.url}", flush=True)
    threading.Event().wait()  # serve (in the server's thread) until killed


if __name__ == "__main__":
    main()
