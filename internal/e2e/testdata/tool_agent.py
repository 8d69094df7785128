#!/usr/bin/env python3
"""A test agent that calls tools through the Python SDK (internal/e2e/tools_test.go).

The user's message is JSON::

    {"tool": "name", "args": {...}, "key": "idempotency key (optional)",
     "repeat": n, "timeout_ms": ms, "gate": "URL", "report": "URL"}

For each of ``repeat`` (default 1) rounds the handler calls
``req.client.tools.invoke(tool, args, idempotency_key=key)`` and streams one
delta: the result as JSON (sorted keys), ``error:<code>`` when the call ended
failed (ToolError), or ``api_error:<code>`` when the platform refused the
request; each delta ends with a newline. The run then finishes normally, so
a return_to_agent failure ends the run DONE.

``quiet``: no first event before the call: the handler is silent while its
tool call runs, as an agent that calls a slow tool first is.

``gate``: GET this URL (repeatedly, until it answers 200) before the first
call, so a test can hold the agent back. ``report``: POST the outcome of each
call there as JSON ({ok, result} or {ok:false, code, tool_call_id, state} or
{ok:false, api_error, status}) before the delta is yielded, so a test sees it
even when the platform has closed the stream (a cancelled run).

The SDK comes from PYTHONPATH (the repository's sdk/python).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

import agentplane


def _wait_gate(url: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise agentplane.AgentError("gate_timeout", "the test never opened " + url)


def _report(url: str, outcome: dict) -> None:
    data = json.dumps(outcome).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
    except (urllib.error.URLError, OSError) as e:
        print(f"tool_agent: report to {url} failed: {e}", file=sys.stderr, flush=True)


def handle(req: agentplane.Request):
    try:
        spec = json.loads(str(req.input_message.get("content") or "{}"))
    except ValueError:
        yield "bad message: not JSON\n"
        return
    name = spec.get("tool")
    # A first event at once (unless quiet): the test is of the tool call,
    # not of the platform's patience with a silent agent.
    if not spec.get("quiet"):
        yield agentplane.State("calling_tool", {"tool": name})
    if spec.get("gate"):
        _wait_gate(spec["gate"])
    if not name:
        yield "no tool\n"
        return
    report = spec.get("report")
    for _ in range(int(spec.get("repeat") or 1)):
        try:
            result = req.client.tools.invoke(
                name, spec.get("args") or {}, idempotency_key=spec.get("key"), timeout_ms=spec.get("timeout_ms")
            )
            outcome = {"ok": True, "result": result}
            text = json.dumps(result, sort_keys=True)
        except agentplane.ToolError as e:
            outcome = {"ok": False, "code": e.code, "tool_call_id": e.tool_call_id, "state": e.state}
            text = "error:" + e.code
        except agentplane.APIError as e:
            outcome = {"ok": False, "api_error": e.code, "status": e.status}
            text = "api_error:" + e.code
        if report:
            _report(report, outcome)
        yield text + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--agent-id", default="tool-agent")
    args = p.parse_args()
    url = os.environ[agentplane.ENV_URL]
    server = agentplane.AgentServer(handle, "127.0.0.1", args.port, platform_url=url)
    res = agentplane.register(url, os.environ["AGENTPLANE_ADMIN_KEY"], args.agent_id, "tool test agent", server.url, capabilities=["chat"], rotate_key=True)
    server.agent_api_key = res["agent_api_key"]
    print(f"tool_agent {args.agent_id} listening on {server.url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
