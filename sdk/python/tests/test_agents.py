"""client.agents against a real HTTP server speaking the direct form's wire format.

These pin the SDK's own logic (framing, re-attach and dedupe, errors); the
real platform with real child agents is exercised from Go, by
internal/e2e/multiagent_sdk_test.go.
"""

from __future__ import annotations

import json
import os
import threading
import time
import unittest
from typing import Any, Dict, List, Tuple
from unittest import mock

import agentplane

from ._support import FakePlatform, Recorded, invoke, iter_sse

INVOKE = "POST /v1/agents/weather:invoke"
SSE = {"Content-Type": "text/event-stream", "x-child-run-id": "run_child"}


def ev(seq: int, typ: str, **fields: Any) -> bytes:
    data = {"type": typ, "session_id": "ses_1", "seq": seq, "event_id": f"evt_{seq}", "ts": 1, "run_id": "run_child", "parent_run_id": "run_1"}
    data.update(fields)
    return b"event: " + typ.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


def stream(*events: bytes) -> Tuple[int, bytes, Dict[str, str]]:
    return 200, b": keep-alive\n\n" + b"".join(events), dict(SSE)


DONE = ev(5, "done", usage={"words": 2}, output="Sunny in Paris", status="DONE", total_usage={"llm_calls": 1, "tool_calls": 1})


def script(*replies: Any) -> Any:
    """Answer with replies in order, then repeat the last one."""
    lock = threading.Lock()
    n = [0]

    def responder(rec: Recorded) -> Any:
        with lock:
            r = replies[min(n[0], len(replies) - 1)]
            n[0] += 1
            return r

    return responder


class AgentsTest(unittest.TestCase):
    def setUp(self) -> None:
        patcher = mock.patch.dict(os.environ, {}, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop(agentplane.ENV_URL, None)

    def platform(self, routes: Dict[str, Any]) -> FakePlatform:
        p = FakePlatform(routes)
        self.addCleanup(p.close)
        return p

    def agents(self, p: FakePlatform) -> agentplane.Agents:
        a = agentplane.Client(p.url, "ak_1", run_id="run_1", session_id="ses_1").agents
        a.retry_backoff = (0.001, 0.004)
        return a

    def test_streams_events_then_text_and_result(self) -> None:
        p = self.platform({INVOKE: script(stream(ev(1, "run_started", agent_id="weather"), ev(2, "delta", text="Sunny "),
                                                 ev(3, "state", state="thinking", detail={}, source="agent"), ev(4, "delta", text="in Paris"), DONE))})
        call = self.agents(p).invoke("weather", "Weather in Paris?")
        self.assertEqual(call.run_id, "run_child")
        got = [(e.type, e.seq, e.text) for e in call]
        self.assertEqual(got, [("run_started", 1, ""), ("delta", 2, "Sunny "), ("state", 3, ""), ("delta", 4, "in Paris"), ("done", 5, "")])
        self.assertEqual(call.text(), "Sunny in Paris")
        self.assertEqual(call.result(), {"run_id": "run_child", "status": "DONE", "output": "Sunny in Paris", "usage": {"words": 2},
                                         "total_usage": {"llm_calls": 1, "tool_calls": 1}, "error": None})
        rec = p.requests[0]
        self.assertEqual(rec.headers["Authorization"], "Bearer ak_1")
        self.assertEqual(rec.headers["x-run-id"], "run_1")
        self.assertEqual(rec.headers["Accept"], "text/event-stream")
        self.assertEqual(rec.body["message"], {"role": "user", "content": "Weather in Paris?"})
        self.assertTrue(rec.body["idempotency_key"].startswith("idk_"))

    def test_child_that_asks_back(self) -> None:
        # input_required ends the child's stream: not a failure in result(),
        # the question raised as InputRequired by text().
        p = self.platform({INVOKE: script(stream(ev(1, "run_started", agent_id="weather"),
                                                 ev(2, "input_required", question="Which city?", detail={"choices": ["Paris"]}, status="INPUT_REQUIRED")))})
        call = self.agents(p).invoke("weather", "Weather?")
        self.assertEqual([e.type for e in call], ["run_started", "input_required"])
        res = call.result()
        self.assertEqual((res["status"], res["question"], res["detail"], res["error"]), ("INPUT_REQUIRED", "Which city?", {"choices": ["Paris"]}, None))
        with self.assertRaises(agentplane.InputRequired) as cm:
            call.text()
        self.assertEqual((cm.exception.question, cm.exception.run_id), ("Which city?", "run_child"))

    def test_result_without_iterating(self) -> None:
        p = self.platform({INVOKE: script(stream(ev(1, "run_started"), ev(2, "delta", text="x"), DONE))})
        self.assertEqual(self.agents(p).invoke("weather", {"role": "user", "content": "hi"}, idempotency_key="k1").text(), "Sunny in Paris")
        self.assertEqual(p.requests[0].body, {"message": {"role": "user", "content": "hi"}, "idempotency_key": "k1"})

    def test_dropped_stream_reattaches_with_the_same_key_and_skips_what_was_seen(self) -> None:
        # The first stream breaks off after two events; the platform replays
        # the child from its first event on the second.
        p = self.platform({INVOKE: script(
            stream(ev(1, "run_started"), ev(2, "delta", text="Sunny ")),
            stream(ev(1, "run_started"), ev(2, "delta", text="Sunny "), ev(4, "delta", text="in Paris"), DONE),
        )})
        call = self.agents(p).invoke("weather", "hi")
        seqs = [e.seq for e in call]
        self.assertEqual(seqs, [1, 2, 4, 5])
        self.assertEqual(call.text(), "Sunny in Paris")
        keys = {r.body["idempotency_key"] for r in p.requests}
        self.assertEqual(len(p.requests), 2)
        self.assertEqual(len(keys), 1, "every attach sends the same key")
        self.assertEqual(call.attaches, 2)

    def test_connection_dropped_without_answer_is_retried(self) -> None:
        p = self.platform({INVOKE: script((0, b""), (503, {"error": {"code": "store_unavailable", "message": "later"}}), stream(ev(1, "run_started"), DONE))})
        self.assertEqual(self.agents(p).invoke("weather", "hi").text(), "Sunny in Paris")
        self.assertEqual(len(p.requests), 3)

    def test_rate_limited_is_retried(self) -> None:
        # A 429 (the key's token bucket is empty) is not a refusal: the call
        # is sent again, with its key, after the retry_after_ms the platform
        # asked for — at the invoke and at a re-attach alike.
        limited = (429, {"error": {"code": "rate_limited", "message": "agent key over its request rate; retry later", "retry_after": 1, "retry_after_ms": 30}}, {"Retry-After": "1"})
        p = self.platform({INVOKE: script(limited, limited, stream(ev(1, "run_started"), ev(2, "delta", text="Sunny ")), limited,
                                          stream(ev(1, "run_started"), ev(2, "delta", text="Sunny "), ev(4, "delta", text="in Paris"), DONE))})
        start = time.monotonic()
        call = self.agents(p).invoke("weather", "hi")
        self.assertEqual(call.text(), "Sunny in Paris")
        took = time.monotonic() - start
        self.assertEqual(len(p.requests), 5)
        self.assertEqual(len({r.body["idempotency_key"] for r in p.requests}), 1, "every attach sends the same key")
        self.assertEqual(call.attaches, 2)
        self.assertGreaterEqual(took, 3 * 0.030, "retried before the retry_after_ms the platform asked for")
        self.assertLess(took, 1.0, "waited the header's whole second instead of retry_after_ms")

    def test_gives_up_after_max_attempts(self) -> None:
        p = self.platform({INVOKE: script(stream(ev(1, "run_started")))})
        call = self.agents(p).invoke("weather", "hi")
        with self.assertRaises(agentplane.APIError) as cm:
            call.result()
        self.assertEqual(cm.exception.code, "connection_error")
        self.assertNotIsInstance(cm.exception, agentplane.SubAgentError)
        self.assertEqual(len(p.requests), agentplane.agents.MAX_ATTEMPTS)

    def test_failed_child_raises_sub_agent_error(self) -> None:
        p = self.platform({INVOKE: script(stream(ev(1, "run_started"), ev(2, "error", code="boom", message="told to fail", status="FAILED", total_usage={"llm_calls": 0})))})
        call = self.agents(p).invoke("weather", "hi")
        self.assertEqual([e.type for e in call], ["run_started", "error"], "iterating does not raise")
        with self.assertRaises(agentplane.SubAgentError) as cm:
            call.result()
        e = cm.exception
        self.assertEqual((e.code, e.message, e.run_id, e.run_status, e.status, e.agent_id), ("boom", "told to fail", "run_child", "FAILED", 0, "weather"))
        self.assertIsInstance(e, agentplane.AgentError, "unhandled, it fails the caller's run with the child's code")
        self.assertEqual(e.result["error"], {"code": "boom", "message": "told to fail"})
        with self.assertRaises(agentplane.SubAgentError):
            call.text()

    def test_cancelled_child(self) -> None:
        p = self.platform({INVOKE: script(stream(ev(1, "run_started"), ev(2, "error", code="parent_ended", message="its parent ended", status="CANCELLED")))})
        with self.assertRaises(agentplane.SubAgentError) as cm:
            self.agents(p).invoke("weather", "hi").result()
        self.assertEqual((cm.exception.code, cm.exception.run_status), ("parent_ended", "CANCELLED"))

    def test_refusal_raises_at_invoke(self) -> None:
        p = self.platform({INVOKE: script((403, {"error": {"code": "agent_not_linked", "message": "not in linked_agents"}}))})
        with self.assertRaises(agentplane.SubAgentError) as cm:
            self.agents(p).invoke("weather", "hi")
        e = cm.exception
        self.assertEqual((e.code, e.status, e.run_id), ("agent_not_linked", 403, ""))
        self.assertIsInstance(e, agentplane.APIError)
        self.assertEqual(len(p.requests), 1, "a refusal is not retried")

    def test_needs_a_run(self) -> None:
        with self.assertRaises(ValueError):
            agentplane.Client("http://127.0.0.1:1", "ak").agents.invoke("weather", "hi")


class RequestTest(unittest.TestCase):
    def test_depth_parent_and_agents(self) -> None:
        seen: List[Any] = []

        def handle(req: agentplane.Request) -> str:
            seen.append((req.depth, req.parent_run_id, req.agents._client.run_id, req.agents is req.client.agents))
            return "ok"

        with agentplane.AgentServer(handle, platform_url="http://127.0.0.1:1", agent_api_key="ak") as srv:
            srv.start()
            body = {"agent_id": "weather", "session_id": "ses_1", "run_id": "run_child", "parent_run_id": "run_1", "depth": 2,
                    "input_message": {"role": "user", "content": "hi"}, "messages": [], "context": {"user_id": "u1"}}
            conn, resp = invoke(srv.port, body)
            try:
                self.assertEqual([e[0] for e in iter_sse(resp) if e[0]], ["delta", "done"])
            finally:
                conn.close()
        self.assertEqual(seen, [(2, "run_1", "run_child", True)])


if __name__ == "__main__":
    unittest.main()
