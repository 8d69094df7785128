#!/usr/bin/env python3
"""An echo agent: the smallest useful agent built on the agentplane Python SDK.

It registers itself with the platform (when AGENTPLANE_ADMIN_KEY is set),
serves POST /invoke, and for each message:

  1. sends a ``state`` event "thinking",
  2. reads the session's transcript through the platform (DESIGN §6),
  3. streams a greeting plus the user's words back, one word every ~50 ms,
  4. reports a small ``usage`` in ``done``.

Run it from a checkout without installing anything (see README.md)::

    AGENTPLANE_URL=http://127.0.0.1:8080 AGENTPLANE_ADMIN_KEY=... python3 examples/python/echo_agent.py
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading

# Use the SDK from this checkout; no pip install needed.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))

import agentplane  # noqa: E402

log = logging.getLogger("echo_agent")

WORD_DELAY = 0.05  # seconds between words, so the streaming is visible
HEARTBEAT_EVERY = 30.0  # seconds


def handle(req: agentplane.Request):
    """Echo the input back word by word, after saying how long the session is."""
    yield agentplane.State("thinking", {"step": "reading the transcript"})

    count = None
    if req.has_client:
        try:
            count = len(req.client.transcript())
        except agentplane.APIError as e:
            # The echo still works without the transcript; say why it is missing.
            log.warning("transcript unavailable (run_id=%s): %s", req.run_id, e)

    text = str(req.input_message.get("content", "")).strip() or "(nothing)"
    who = f" {req.user_id}" if req.user_id else ""
    reply = f"Hello{who}! You said: {text}"
    if count is not None:
        reply += f" (this session has {count} message{'s' if count != 1 else ''} so far)"

    words = reply.split(" ")
    for i, word in enumerate(words):
        # wait_cancelled doubles as the delay and as the stop signal when the
        # user cancels the run.
        if i and req.wait_cancelled(WORD_DELAY):
            return
        yield word if i == 0 else " " + word
    req.usage = {"words": len(words)}


def heartbeat_forever(client: agentplane.Client, stop: threading.Event) -> None:
    """Tell the platform the agent is alive until stop is set."""
    while not stop.wait(HEARTBEAT_EVERY):
        try:
            client.heartbeat()
        except agentplane.APIError as e:
            log.warning("heartbeat failed: %s", e)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9003, help="port to listen on (default 9003; 0 picks a free one)")
    p.add_argument("--agent-id", default="echo", help="agent id to register (default echo)")
    p.add_argument("--name", default="Echo agent", help="display name to register")
    p.add_argument("--endpoint", help="URL the platform calls (default http://HOST:PORT)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    platform_url = os.environ.get(agentplane.ENV_URL, "http://127.0.0.1:8080")
    # Bind first: with --port 0 the endpoint to register is only known now.
    server = agentplane.AgentServer(handle, args.host, args.port, platform_url=platform_url)
    endpoint = args.endpoint or server.url

    admin_key = os.environ.get("AGENTPLANE_ADMIN_KEY")
    agent_key = os.environ.get(agentplane.ENV_AGENT_KEY)
    if admin_key:
        # Without a saved agent key, rotate: the platform shows a key only on
        # first registration or rotation, and a restarted agent needs one.
        res = agentplane.register(
            platform_url, admin_key, args.agent_id, args.name, endpoint, capabilities=["chat"], rotate_key=not agent_key
        )
        agent_key = res.get("agent_api_key") or agent_key
        log.info("registered %s at %s with %s", args.agent_id, endpoint, platform_url)
    if not agent_key:
        log.error("no agent key: set AGENTPLANE_ADMIN_KEY (to register) or %s", agentplane.ENV_AGENT_KEY)
        server.stop()
        return 2
    server.agent_api_key = agent_key

    stop = threading.Event()
    threading.Thread(
        target=heartbeat_forever, args=(agentplane.Client(platform_url, agent_key, agent_id=args.agent_id), stop), daemon=True
    ).start()

    log.info("echo agent listening on %s", server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
