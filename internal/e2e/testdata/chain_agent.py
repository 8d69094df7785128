#!/usr/bin/env python3
"""A test agent that calls other agents through the platform (internal/e2e/multiagent_test.go).

It registers itself (``--agent-id``, ``--links``, ``--echo``) and runs the
plan in its input message, a JSON object ``{"steps": [...], "report": URL}``
(any other message is answered ``echo:<message>``). Each step streams one
delta, ending with a newline:

- ``{"say": text}``: ``text``;
- ``{"call": agent_id, "form": "tool"|"json"|"sse"|"sdk", "message": str or
  plan, "key": idempotency key}``: asks another agent — the tool form through
  ``req.client.tools.invoke("call_<agent_id>", {"message": ...})``, the direct
  form by POST /v1/agents/{agent_id}:invoke with urllib (JSON, or SSE when
  ``sse``: the HTTP surface itself) or with the SDK's
  ``req.agents.invoke`` (``sdk``) — and streams the child's output,
  ``error:<code>`` when it failed (``sdk``: ``error:<code>:<status>``),
  ``api_error:<code>`` when the platform refused. With ``sdk`` the agent
  reports ``sdk_call`` with the events it iterated, the call's ``result()``
  and how often it attached; ``"raise": true`` lets a child's
  SubAgentError escape the handler;
- ``{"tool": name, "args": {...}}``: a tool call, its result as JSON (sorted
  keys) or ``error:<code>``;
- ``{"llm": prompt}``: one chat completion through the LLM proxy, ``llm:ok``;
- ``{"fail": code}``: fails the run with that code;
- ``{"hold": true}``: waits until the platform closes the request.

``report``: POST ``{"agent", "run_id", "parent_run_id", "depth", "event"}``
there when invoked (event ``invoked``), when the platform closed the
request (``closed``) and when the handler returned (``returned``), so a
test can tell no request was left open.

The SDK comes from PYTHONPATH (the repository's sdk/python).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import agentplane

AGENT_ID = ""


def _post(url: str, body: dict, headers: dict, timeout: float = 300) -> tuple:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json", **headers})
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), None
    return resp.status, None, resp


def _report(url: str, req: agentplane.Request, event: str, extra: dict = None) -> None:
    if not url:
        return
    body = {"agent": AGENT_ID, "run_id": req.run_id, "parent_run_id": req.parent_run_id, "depth": req.depth, "event": event, **(extra or {})}
    try:
        _post(url, body, {}, timeout=30)[2].read()
    except Exception as e:  # the test may have stopped listening
        print(f"chain_agent: report failed: {e}", file=sys.stderr, flush=True)


def _api_error(raw: bytes) -> str:
    try:
        return json.loads(raw)["error"]["code"]
    except Exception:
        return "unknown"


def _call(req: agentplane.Request, step: dict, report: str):
    target = step["call"]
    message = step.get("message", "")
    if not isinstance(message, str):
        message = json.dumps(message)
    form = step.get("form", "tool")
    if form == "sdk":
        yield from _call_sdk(req, step, target, message, report)
        return
    if form == "tool":
        try:
            result = req.client.tools.invoke("call_" + target, {"message": message}, idempotency_key=step.get("key"))
            yield str(result.get("output", "")) + "\n"
        except agentplane.ToolError as e:
            yield ("api_error:" if e.status else "error:") + e.code + "\n"
        return
    client = req.client
    headers = {"Authorization": "Bearer " + client.agent_api_key, **client.headers()}
    body = {"message": {"role": "user", "content": message}}
    if step.get("key"):
        body["idempotency_key"] = step["key"]
    url = client.base_url + "/v1/agents/" + target + ":invoke"
    if form == "json":
        status, raw, resp = _post(url, body, headers)
        if resp is None:
            yield "api_error:" + _api_error(raw) + "\n"
            return
        res = json.loads(resp.read())
        if res.get("status") != "DONE":
            yield "error:" + str((res.get("error") or {}).get("code")) + "\n"
            return
        yield res["output"] + "\n"
        return
    status, raw, resp = _post(url, body, {**headers, "Accept": "text/event-stream"})
    if resp is None:
        yield "api_error:" + _api_error(raw) + "\n"
        return
    event = ""
    text = []
    for line in resp:
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: "):])
            if event == "delta":
                text.append(data["text"])
            elif event == "done":
                yield "".join(text) + "\n"
                return
            elif event == "error":
                yield "error:" + str(data.get("code")) + "\n"
                return
    yield "error:stream_ended\n"


def _call_sdk(req: agentplane.Request, step: dict, target: str, message: str, report: str):
    try:
        call = req.agents.invoke(target, message, idempotency_key=step.get("key"))
    except agentplane.SubAgentError as e:
        yield "api_error:" + e.code + "\n"
        return
    seen = [{"type": ev.type, "seq": ev.seq, "run_id": ev.run_id, "parent_run_id": ev.parent_run_id} for ev in call]
    try:
        line = call.text()
        res = call.result()
    except agentplane.SubAgentError as e:
        if step.get("raise"):
            raise
        line, res = "error:" + e.code + ":" + e.run_status + "\n", e.result
    _report(report, req, "sdk_call", {"events": seen, "result": res, "child": call.run_id, "attaches": call.attaches})
    yield line if line.endswith("\n") else line + "\n"


def _llm(req: agentplane.Request, prompt: str) -> str:
    client = req.client
    headers = {"Authorization": "Bearer " + client.agent_api_key, **client.headers()}
    body = {"model": "fake-gpt", "messages": [{"role": "user", "content": prompt}]}
    status, raw, resp = _post(client.base_url + "/v1/chat/completions", body, headers)
    if resp is None:
        return "llm_error:" + _api_error(raw)
    json.loads(resp.read())
    return "llm:ok"


def handle(req: agentplane.Request):
    content = str(req.input_message.get("content") or "")
    try:
        plan = json.loads(content)
    except ValueError:
        plan = None
    if not isinstance(plan, dict) or "steps" not in plan:
        yield "echo:" + content + "\n"
        return
    report = plan.get("report", "")
    finished = threading.Event()
    finished_at = [0.0]

    def watch() -> None:
        # The platform may close the request just as the handler finishes
        # (a child's end reaches it first): keep watching a moment after.
        while not finished.wait(0.05) or finished_at[0] + 3 > time.monotonic():
            if req.wait_cancelled(0.05):
                _report(report, req, "closed")
                return

    _report(report, req, "invoked")
    threading.Thread(target=watch, daemon=True).start()
    try:
        # A first event at once: the platform's first-byte timer must not
        # fire while a step waits on the platform.
        yield agentplane.State("planning", {"steps": len(plan["steps"])})
        for step in plan["steps"]:
            if "say" in step:
                yield step["say"] + "\n"
            elif "call" in step:
                yield from _call(req, step, report)
            elif "tool" in step:
                try:
                    result = req.client.tools.invoke(step["tool"], step.get("args") or {})
                    yield json.dumps(result, sort_keys=True) + "\n"
                except agentplane.ToolError as e:
                    yield "error:" + e.code + "\n"
            elif "llm" in step:
                yield _llm(req, step["llm"]) + "\n"
            elif "fail" in step:
                raise agentplane.AgentError(step["fail"], "told to fail")
            elif step.get("hold"):
                while not req.wait_cancelled(0.1):
                    pass
                return
    finally:
        finished_at[0] = time.monotonic()
        finished.set()
        _report(report, req, "returned")


def main() -> int:
    global AGENT_ID
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--agent-id", required=True)
    p.add_argument("--links", default="")
    p.add_argument("--echo", default="")
    args = p.parse_args()
    AGENT_ID = args.agent_id
    url = os.environ[agentplane.ENV_URL]
    server = agentplane.AgentServer(handle, "127.0.0.1", args.port, platform_url=url)
    body = {
        "agent_id": args.agent_id,
        "name": "Chain " + args.agent_id,
        "description": "runs the plan it is given",
        "endpoint": server.url,
        "linked_agents": [x for x in args.links.split(",") if x],
        "rotate_key": True,
    }
    if args.echo:
        body["sub_agent_echo"] = args.echo
    status, raw, resp = _post(url + "/v1/agents/register", body, {"Authorization": "Bearer " + os.environ["AGENTPLANE_ADMIN_KEY"]}, timeout=30)
    if resp is None:
        print(f"chain_agent: register failed: {status} {raw!r}", file=sys.stderr, flush=True)
        return 1
    server.agent_api_key = json.loads(resp.read())["agent_api_key"]
    print(f"chain_agent {args.agent_id} listening on {server.url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
