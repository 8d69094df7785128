#!/usr/bin/env python3
"""A test agent for internal/e2e/python_sdk_output_test.go (Python SDK edge cases).

It registers itself as ``--agent-id`` (AGENTPLANE_URL, AGENTPLANE_ADMIN_KEY)
and answers according to the user's message:

- ``big``: returns one string of about 1.5 MiB of UTF-8 (ASCII and
  non-ASCII) — more than one SSE event may carry (1 MiB), less than a run's
  output bound (8 MiB);
- ``big_error``: raises ``AgentError("big_error_code", <2 MiB message>)``;
- ``gen_return``: a generator that yields a delta, then ``return``s an
  ``InputRequired``.

The SDK comes from PYTHONPATH (the repository's sdk/python).
"""

from __future__ import annotations

import argparse
import os
import threading

import agentplane

BIG_UNIT = "héllo wörld ✓ 0123456789\n"
BIG_REPEAT = 56000  # about 1.5 MiB of UTF-8


def handle(req: agentplane.Request):
    content = str(req.input_message.get("content", ""))
    if content == "big":
        return BIG_UNIT * BIG_REPEAT
    if content == "big_error":
        raise agentplane.AgentError("big_error_code", "z" * (2 << 20))
    if content == "gen_return":
        return _gen_return()
    return "unknown command " + content


def _gen_return():
    yield "Let me see. "
    return agentplane.InputRequired("Which one?")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent-id", required=True)
    args = ap.parse_args()
    server = agentplane.AgentServer(handle, port=0).start()
    res = agentplane.register(os.environ["AGENTPLANE_URL"], os.environ["AGENTPLANE_ADMIN_KEY"], args.agent_id, "Audit agent", server.url, rotate_key=True)
    server.agent_api_key = res["agent_api_key"]
    print(f"output agent {args.agent_id} at {server.url}", flush=True)
    threading.Event().wait()  # serve (in the server's thread) until killed


if __name__ == "__main__":
    main()
