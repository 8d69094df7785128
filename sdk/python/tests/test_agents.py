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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Tuple
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

    def test_stream_failed_is_bounded(self) -> None:
        # When the platform cannot follow the child's log it ends the stream
        # with `error {code: stream_failed}` and no seq
        # (internal/httpapi/invoke.go), asking the caller to attach again.
        # A platform that keeps doing so must be retried like any broken
        # stream (backoff, at most MAX_ATTEMPTS), not re-invoked forever in
        # a tight loop. These are the platform's exact bytes.
        failed = (b'event: error\ndata: {"type":"error","run_id":"run_child","code":"stream_failed",'
                  b'"message":"the child\'s event stream broke off; invoke again with the same idempotency_key to attach again"}\n\n')
        p = self.platform({INVOKE: script(stream(ev(1, "run_started"), failed))})
        call = self.agents(p).invoke("weather", "hi")
        it = iter(call)
        self.assertEqual(next(it).type, "run_started")
        done = threading.Event()
        got: List[BaseException] = []

        def rest() -> None:
            try:
                call.result()
            except BaseException as e:  # noqa: BLE001 - the test reads it
                got.append(e)
            done.set()

        threading.Thread(target=rest, daemon=True).start()
        if not done.wait(5):
            call.close()
            self.fail(f"still re-attaching after 5 s and {len(p.requests)} invokes: stream_failed is retried without bound")
        self.assertEqual(len(got), 1, "result() returned after endless stream_failed")
        e = got[0]
        self.assertIsInstance(e, agentplane.APIError)
        self.assertNotIsInstance(e, agentplane.SubAgentError, "the child did not fail: the stream did")
        self.assertIn("stream_failed", str(e))
        self.assertIn("invoke again with the same idempotency_key", str(e))
        self.assertLessEqual(len(p.requests), agentplane.agents.MAX_ATTEMPTS + 1)

    def test_stream_failed_then_attach_again(self) -> None:
        # One stream_failed is no failure: the next attach resumes the child.
        failed = b'event: error\ndata: {"type":"error","run_id":"run_child","code":"stream_failed","message":"broke off"}\n\n'
        p = self.platform({INVOKE: script(stream(ev(1, "run_started"), failed), stream(ev(1, "run_started"), ev(2, "delta", text="x"), DONE))})
        call = self.agents(p).invoke("weather", "hi")
        self.assertEqual([e.seq for e in call], [1, 2, 5])
        self.assertEqual(call.text(), "Sunny in Paris")
        self.assertEqual(len(p.requests), 2)

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

    def test_answer_cut_short_or_header_http_cannot_carry(self) -> None:
        # Both are the documented APIError, never http.client's or the
        # codec's exception: a garbled answer is retried like a reset, a
        # traceparent that is not Latin-1 is refused before anything is sent.
        garbled = b"HTTP/1.1 2OO OK\r\n\r\n"  # http.client.BadStatusLine
        p = self.platform({INVOKE: script((0, garbled), stream(ev(1, "run_started"), DONE))})
        self.assertEqual(self.agents(p).invoke("weather", "hi").text(), "Sunny in Paris")
        self.assertEqual(len(p.requests), 2)
        bad = agentplane.Client(p.url, "ak_1", run_id="run_1", session_id="ses_1", traceparent="00-\u2603").agents
        with self.assertRaises(agentplane.APIError) as cm:
            bad.invoke("weather", "hi")
        self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_request", 0))
        self.assertEqual(len(p.requests), 2)

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

    def _cancel_while_following(self, agents_of: Callable[[agentplane.Request], agentplane.Agents]) -> List[str]:
        """Cancel a run whose handler blocks on a child call made through agents_of(req); return how result() ended."""
        release = threading.Event()
        self.addCleanup(release.set)
        invoked = threading.Event()

        class Child(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("x-child-run-id", "run_child")
                self.end_headers()
                self.wfile.write(b": keep-alive\n\n" + ev(1, "run_started"))
                self.wfile.flush()
                invoked.set()
                release.wait(30)

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Child)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.addCleanup(httpd.server_close)
        self.addCleanup(httpd.shutdown)

        finished = threading.Event()
        outcome: List[str] = []

        def handle(req: agentplane.Request) -> Any:
            try:
                yield "first"
                call = agents_of(req).invoke("weather", "hi")
                try:
                    call.result()
                    outcome.append("result")
                except agentplane.APIError as e:
                    outcome.append(e.code)
                except BaseException as e:  # noqa: BLE001 - the test reads it
                    outcome.append(repr(e))
            finally:
                finished.set()

        with agentplane.AgentServer(handle, platform_url=f"http://127.0.0.1:{httpd.server_address[1]}", agent_api_key="ak") as srv:
            srv.start()
            conn, resp = invoke(srv.port)
            self.assertEqual(next(iter_sse(resp))[0], "delta")
            self.assertTrue(invoked.wait(5), "the child was not invoked")
            time.sleep(0.05)  # let invoke() return and the handler block on the stream
            conn.close()  # the platform closes the request: the run was cancelled
            resp.close()
            self.assertTrue(finished.wait(5), "the child call kept the cancelled run's handler blocked")
        return outcome

    def test_cancelled_run_closes_its_child_call(self) -> None:
        # The call is closed from the cancelling thread while the handler's
        # thread reads its stream: result() raises the documented
        # SubAgentError stream_closed, never http.client's AttributeError
        # from the two closes racing (repeated: it is a race).
        for _ in range(8):
            self.assertEqual(self._cancel_while_following(lambda req: req.agents), ["stream_closed"])

    def test_bound_client_call_closes_when_the_run_is_cancelled(self) -> None:
        # req.client.bind(traceparent=...) (README: how an agent with
        # OpenTelemetry of its own passes its span) is still this run's
        # client: a child call followed through it stops with the run, as
        # one through req.agents does, instead of blocking the handler on a
        # stream that stays open (45 s per attach) after the run was
        # cancelled. The platform is a real HTTP server holding the child's
        # stream open, as the platform does while a child runs.
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        for _ in range(3):
            self.assertEqual(self._cancel_while_following(lambda req: req.client.bind(traceparent=tp).agents), ["stream_closed"])


if __name__ == "__main__":
    unittest.main()
