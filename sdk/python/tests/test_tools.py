"""client.tools against a real HTTP server speaking the tool-call contract."""

from __future__ import annotations

import os
import threading
import time
import unittest
from typing import Any, Dict, List, Tuple
from unittest import mock

import agentplane
from agentplane import tools as tools_mod

from ._support import FakePlatform, Recorded, events

INVOKE = "POST /v1/tools/demo.weather:invoke"
WAIT = "POST /v1/tool_calls/tc_1:wait"


def view(status: str, state: str, **extra: Any) -> Tuple[int, Dict[str, Any]]:
    v: Dict[str, Any] = {"tool_call_id": "tc_1", "tool_name": "demo.weather", "run_id": "run_1", "status": status, "state": state, "created_at": 1, "updated_at": 2}
    v.update(extra)
    return 200, v


def err(status: int, code: str) -> Tuple[int, Dict[str, Any]]:
    return status, {"error": {"code": code, "message": code + " happened"}}


def rate_limited(ms: int) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
    """The platform's 429 (API.md, Rate limits): retry_after_ms in the body, whole seconds in Retry-After."""
    secs = max(1, (ms + 999) // 1000)
    body = {"error": {"code": "rate_limited", "message": "agent key over its request rate; retry later", "retry_after": secs, "retry_after_ms": ms}}
    return 429, body, {"Retry-After": str(secs)}


def script(*replies: Tuple[Any, ...]) -> Any:
    """Answer with replies in order, then repeat the last one."""
    lock = threading.Lock()
    n = [0]

    def responder(rec: Recorded) -> Tuple[Any, ...]:
        with lock:
            r = replies[min(n[0], len(replies) - 1)]
            n[0] += 1
            return r

    return responder


class ToolsTest(unittest.TestCase):
    def setUp(self) -> None:
        patcher = mock.patch.dict(os.environ, {}, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop(agentplane.ENV_URL, None)

    def platform(self, routes: Dict[str, Any]) -> FakePlatform:
        p = FakePlatform(routes)
        self.addCleanup(p.close)
        return p

    def tools(self, p: FakePlatform) -> agentplane.Tools:
        t = agentplane.Client(p.url, "ak_1", run_id="run_1", session_id="ses_1").tools
        t.wait_pause = (0.001, 0.003)
        t.retry_backoff = (0.001, 0.004)
        return t

    def to(self, p: FakePlatform, route: str) -> List[Recorded]:
        return [r for r in p.requests if f"{r.method} {r.path}" == route]

    def assert_attributed(self, rec: Recorded) -> None:
        self.assertEqual(rec.headers["Authorization"], "Bearer ak_1")
        self.assertEqual(rec.headers["x-run-id"], "run_1")
        self.assertEqual(rec.headers["x-session-id"], "ses_1")

    def test_succeeded_at_once(self) -> None:
        p = self.platform({INVOKE: script(view("succeeded", "SUCCEEDED", result={"temp_c": 21}))})
        self.assertEqual(self.tools(p).invoke("demo.weather", {"city": "Paris"}, timeout_ms=1500), {"temp_c": 21})
        self.assertEqual(len(p.requests), 1, "no :wait for a call that is already over")
        rec = p.requests[0]
        self.assert_attributed(rec)
        self.assertEqual(rec.body["run_id"], "run_1")
        self.assertEqual(rec.body["args"], {"city": "Paris"})
        self.assertEqual(rec.body["timeout_ms"], 1500)
        self.assertGreaterEqual(len(rec.body["idempotency_key"]), 16)

    def test_no_args_sends_an_object_and_no_timeout(self) -> None:
        p = self.platform({"POST /v1/tools/client.now:invoke": script(view("succeeded", "SUCCEEDED", result="noon"))})
        self.tools(p).invoke("client.now")
        self.assertEqual(p.requests[0].body["args"], {})
        self.assertNotIn("timeout_ms", p.requests[0].body)

    def test_waits_while_pending(self) -> None:
        p = self.platform(
            {
                INVOKE: script(view("pending", "WAITING_APPROVAL", approval_id="ap_1")),
                WAIT: script(view("pending", "WAITING_APPROVAL", approval_id="ap_1"), view("pending", "RUNNING"), view("succeeded", "SUCCEEDED", result={"ok": True})),
            }
        )
        pending: List[Dict[str, Any]] = []
        self.assertEqual(self.tools(p).invoke("demo.weather", {"city": "Oslo"}, on_pending=pending.append), {"ok": True})
        self.assertEqual([(v["state"], v.get("approval_id")) for v in pending], [("WAITING_APPROVAL", "ap_1")])
        waits = self.to(p, WAIT)
        self.assertEqual(len(waits), 3)
        for w in waits:
            self.assert_attributed(w)
            self.assertEqual(w.query, {"timeout_ms": ["30000"]})

    def test_failed_raises_tool_error(self) -> None:
        p = self.platform(
            {
                INVOKE: script(view("pending", "WAITING_APPROVAL", approval_id="ap_1")),
                WAIT: script(view("failed", "REJECTED", approval_id="ap_1", error={"code": "rejected", "message": "too much", "detail": {"reason": "no"}})),
            }
        )
        with self.assertRaises(agentplane.ToolError) as cm:
            self.tools(p).invoke("demo.weather", {})
        e = cm.exception
        self.assertEqual((e.code, e.state, e.tool_call_id, e.tool_name, e.message), ("rejected", "REJECTED", "tc_1", "demo.weather", "too much"))
        self.assertEqual(e.detail, {"reason": "no"})
        self.assertEqual(e.approval_id, "ap_1")
        self.assertIsInstance(e, agentplane.AgentError)
        # One hierarchy: a ToolError is also an APIError; status 0 = the call ran and ended failed.
        self.assertIsInstance(e, agentplane.APIError)
        self.assertEqual(e.status, 0)
        self.assertIn("rejected", str(e))

    def test_failed_at_once_and_without_error_object(self) -> None:
        for reply, code in [
            (view("failed", "FAILED", error={"code": "tool_http_error", "message": "500"}), "tool_http_error"),
            (view("failed", "BLOCKED"), "blocked"),
        ]:
            with self.subTest(code=code):
                p = self.platform({INVOKE: script(reply)})
                with self.assertRaises(agentplane.ToolError) as cm:
                    self.tools(p).invoke("demo.weather", {})
                self.assertEqual(cm.exception.code, code)
                self.assertEqual(len(p.requests), 1)

    def test_retries_gateway_errors_with_the_same_key(self) -> None:
        p = self.platform(
            {
                INVOKE: script(err(503, "unavailable"), err(502, "bad_gateway"), view("pending", "WAITING_CLIENT")),
                WAIT: script(err(504, "gateway_timeout"), view("succeeded", "SUCCEEDED", result=7)),
            }
        )
        t = self.tools(p)
        self.assertEqual(t.invoke("demo.weather", {"city": "Rome"}), 7)
        invokes = self.to(p, INVOKE)
        self.assertEqual(len(invokes), 3)
        self.assertEqual(len({r.body["idempotency_key"] for r in invokes}), 1, "a retry must reuse the key")
        self.assertEqual(len(self.to(p, WAIT)), 2)

        first = invokes[0].body["idempotency_key"]
        t.invoke("demo.weather", {})
        t.invoke("demo.weather", {}, idempotency_key="mine")
        invokes = self.to(p, INVOKE)
        self.assertNotEqual(invokes[3].body["idempotency_key"], first, "a new invoke draws a new key")
        self.assertEqual(invokes[4].body["idempotency_key"], "mine")

    def test_retries_a_dropped_connection(self) -> None:
        p = self.platform({INVOKE: script((0, None), view("succeeded", "SUCCEEDED", result="ok"))})
        self.assertEqual(self.tools(p).invoke("demo.weather", {}), "ok")
        invokes = self.to(p, INVOKE)
        self.assertEqual(len(invokes), 2)
        self.assertEqual(invokes[0].body["idempotency_key"], invokes[1].body["idempotency_key"])

    def test_retries_an_answer_cut_short(self) -> None:
        # The answer's headers arrive and its body breaks off (a proxy
        # reset mid-answer): http.client's IncompleteRead is no answer, as a
        # reset is — retried with the same key, not raised raw.
        cut = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{"status":"succ'
        p = self.platform({INVOKE: script((0, cut), view("succeeded", "SUCCEEDED", result="ok"))})
        self.assertEqual(self.tools(p).invoke("demo.weather", {}), "ok")
        invokes = self.to(p, INVOKE)
        self.assertEqual(len(invokes), 2)
        self.assertEqual(invokes[0].body["idempotency_key"], invokes[1].body["idempotency_key"])

    def test_retries_are_bounded(self) -> None:
        p = self.platform({INVOKE: script(err(503, "unavailable"))})
        with self.assertRaises(agentplane.APIError) as cm:
            self.tools(p).invoke("demo.weather", {})
        self.assertEqual(cm.exception.status, 503)
        self.assertNotIsInstance(cm.exception, agentplane.ToolError, "the call may still be running")
        self.assertEqual(len(p.requests), tools_mod.MAX_ATTEMPTS)

    def test_no_retry_on_4xx(self) -> None:
        # A refusal is a ToolError with the platform's code (issue 8 item 18: invalid_args and
        # tool_not_found were bare APIErrors, which `except ToolError` missed), and still an
        # APIError.
        # (A 429 is not a refusal: see test_rate_limited_is_retried.)
        for status, code in [(400, "invalid_args"), (403, "forbidden"), (404, "tool_not_found"), (409, "idempotency_conflict")]:
            with self.subTest(code=code):
                p = self.platform({INVOKE: script(err(status, code))})
                with self.assertRaises(agentplane.ToolError) as cm:
                    self.tools(p).invoke("demo.weather", {})
                e = cm.exception
                self.assertEqual((e.status, e.code, e.tool_name, e.state), (status, code, "demo.weather", ""))
                self.assertIsInstance(e, agentplane.APIError)
                self.assertIn(code, str(e))
                self.assertEqual(len(p.requests), 1)
        p = self.platform({INVOKE: script(view("pending", "WAITING_CLIENT")), WAIT: script(err(404, "not_found"))})
        with self.assertRaises(agentplane.ToolError) as cm:
            self.tools(p).invoke("demo.weather", {})
        self.assertEqual((cm.exception.code, cm.exception.tool_call_id), ("not_found", "tc_1"))
        self.assertEqual(len(self.to(p, WAIT)), 1)

    def test_rate_limited_is_retried(self) -> None:
        # A 429 (the key's token bucket is empty) is no answer about the
        # call: the platform did no work and says when to come back. The
        # invoke is sent again with its key, the :wait again, after the
        # body's retry_after_ms (not the header's whole seconds), and more
        # often than MAX_ATTEMPTS: the limit is not a failure.
        n = tools_mod.MAX_ATTEMPTS + 1
        p = self.platform(
            {
                INVOKE: script(*[rate_limited(40)] * n, view("pending", "WAITING_APPROVAL")),
                WAIT: script(rate_limited(40), view("succeeded", "SUCCEEDED", result=7)),
            }
        )
        start = time.monotonic()
        self.assertEqual(self.tools(p).invoke("demo.weather", {}, timeout=30), 7)
        took = time.monotonic() - start
        invokes = self.to(p, INVOKE)
        self.assertEqual(len(invokes), n + 1)
        self.assertEqual(len({r.body["idempotency_key"] for r in invokes}), 1, "a retry must reuse the key")
        self.assertEqual(len(self.to(p, WAIT)), 2)
        self.assertGreaterEqual(took, (n + 1) * 0.040, "retried before the retry_after_ms the platform asked for")
        self.assertLess(took, 1.0, "waited the header's whole second instead of retry_after_ms")

    def test_rate_limited_header_and_backoff(self) -> None:
        # Without retry_after_ms the Retry-After header (seconds) says how
        # long; without either, the usual backoff.
        p = self.platform({INVOKE: script((429, {"error": {"code": "rate_limited", "message": "slow down"}}, {"Retry-After": "1"}), view("succeeded", "SUCCEEDED", result=1))})
        start = time.monotonic()
        self.assertEqual(self.tools(p).invoke("demo.weather", {}), 1)
        self.assertGreaterEqual(time.monotonic() - start, 1.0)
        p = self.platform({INVOKE: script((429, b"too many requests", {"Content-Type": "text/plain"}), view("succeeded", "SUCCEEDED", result=2))})
        self.assertEqual(self.tools(p).invoke("demo.weather", {}), 2)
        self.assertEqual(len(p.requests), 2)

    def test_rate_limited_past_the_deadline(self) -> None:
        # A 429 asking for longer than the caller's timeout leaves ends the
        # call at once with the rate limit — an APIError carrying
        # retry_after, not a ToolError: the call is still pending.
        p = self.platform({INVOKE: script(view("pending", "WAITING_CLIENT")), WAIT: script(rate_limited(5000))})
        start = time.monotonic()
        with self.assertRaises(agentplane.APIError) as cm:
            self.tools(p).invoke("demo.weather", {}, timeout=0.5)
        self.assertLess(time.monotonic() - start, 1.0)
        e = cm.exception
        self.assertNotIsInstance(e, agentplane.ToolError, "the call did not fail: it is still pending")
        self.assertEqual((e.status, e.code, e.retry_after), (429, "rate_limited", 5.0))
        self.assertIn("tc_1", str(e))
        self.assertIn("pending", str(e))
        self.assertEqual(len(self.to(p, WAIT)), 1)
        # Refused at the invoke itself: the same, without a call id.
        p = self.platform({INVOKE: script(rate_limited(5000))})
        with self.assertRaises(agentplane.APIError) as cm:
            self.tools(p).invoke("demo.weather", {}, timeout=0.5)
        self.assertNotIsInstance(cm.exception, agentplane.ToolError)
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.retry_after), (429, "rate_limited", 5.0))

    def test_timeout_stops_the_loop(self) -> None:
        p = self.platform({INVOKE: script(view("pending", "WAITING_APPROVAL")), WAIT: script(view("pending", "WAITING_APPROVAL"))})
        t = self.tools(p)
        t.wait_pause = (0.01, 0.02)
        start = time.monotonic()
        with self.assertRaises(TimeoutError) as cm:
            t.invoke("demo.weather", {}, timeout=0.2)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertIn("tc_1", str(cm.exception))
        for w in self.to(p, WAIT):
            self.assertTrue(1 <= int(w.query["timeout_ms"][0]) <= 200, w.query)

    def test_needs_a_run(self) -> None:
        p = self.platform({})
        with self.assertRaises(ValueError):
            agentplane.Client(p.url, "ak_1").tools.invoke("demo.weather", {})
        self.assertEqual(p.requests, [])

    def test_jitter_bounds(self) -> None:
        lo, hi = tools_mod.WAIT_PAUSE
        draws = [tools_mod._jitter(lo, hi) for _ in range(10000)]
        self.assertTrue(all(lo <= d <= hi for d in draws))
        mid = (lo + hi) / 2
        self.assertTrue(any(d < mid for d in draws) and any(d > mid for d in draws), "not spread over the range")
        self.assertEqual(tools_mod._jitter(lo, lo), lo)
        self.assertEqual((lo, hi), (0.2, 0.8))

    def test_list_and_get(self) -> None:
        schema = {"type": "function", "function": {"name": "demo__weather", "description": "Weather", "parameters": {"type": "object"}}}
        p = self.platform({"GET /v1/tools": script((200, {"tools": [schema]})), "GET /v1/tool_calls/tc_1": script(view("pending", "WAITING_CLIENT"))})
        t = self.tools(p)
        self.assertEqual(t.list(), [schema])
        self.assertEqual(p.requests[-1].query, {"run_id": ["run_1"]})
        self.assert_attributed(p.requests[-1])
        self.assertEqual(agentplane.tool_name_from_function("demo__weather"), "demo.weather")
        self.assertEqual(agentplane.tool_name_from_function("demo_mcp--lookup_order"), "demo_mcp@lookup_order")
        self.assertEqual(agentplane.tool_name_from_function("files--read__text"), "files@read.text")
        self.assertEqual(agentplane.tool_name_from_function("s---x"), "s@-x")
        self.assertEqual(t.get("tc_1")["state"], "WAITING_CLIENT")


class HandlerToolTest(unittest.TestCase):
    """req.client.tools inside a served agent, against a fake platform."""

    def test_request_client_invokes_and_unhandled_failure_ends_the_run(self) -> None:
        platform = FakePlatform(
            {
                INVOKE: script(view("succeeded", "SUCCEEDED", result={"temp_c": 3})),
                "POST /v1/tools/demo.transfer:invoke": script(view("failed", "REJECTED", error={"code": "rejected", "message": "no"})),
            }
        )
        self.addCleanup(platform.close)

        def handle(req: agentplane.Request) -> Any:
            res = req.client.tools.invoke("demo.weather", {"city": "Oslo"})
            yield f"{res['temp_c']} degrees"
            req.client.tools.invoke("demo.transfer", {"amount": 500, "to": "bob"})

        srv = agentplane.AgentServer(handle, platform_url=platform.url, agent_api_key="ak_1")
        srv.start()
        self.addCleanup(srv.stop)
        evs = events(srv.port)
        self.assertEqual(evs[0], ("delta", {"text": "3 degrees"}))
        self.assertEqual(evs[-1][0], "error")
        self.assertEqual(evs[-1][1]["code"], "rejected")
        rec = platform.requests[0]
        self.assertEqual((rec.headers["x-run-id"], rec.headers["x-session-id"], rec.headers["Authorization"]), ("run_1", "ses_1", "Bearer ak_1"))


if __name__ == "__main__":  # pragma: no cover
    unittest.main()


class RateLimitPauseTest(unittest.TestCase):
    def test_zero_wait_backs_off(self) -> None:
        # A 429 naming a wait of 0 must not be re-sent at full speed: the
        # backoff applies, and grows, as when no wait is named.
        from agentplane.errors import APIError
        from agentplane.tools import _rate_limit_pause

        e = APIError("rate_limited", "slow down", 429, b"", retry_after=0.0)
        backoff = 0.1
        for _ in range(4):
            pause, nxt = _rate_limit_pause(e, backoff, 2.0)
            self.assertGreater(pause, 0.0)
            self.assertGreater(nxt, backoff)
            backoff = nxt
        named = APIError("rate_limited", "slow down", 429, b"", retry_after=1.5)
        pause, nxt = _rate_limit_pause(named, 0.1, 2.0)
        self.assertGreaterEqual(pause, 1.5)
        self.assertEqual(nxt, 0.1)
