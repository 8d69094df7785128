"""The agent server, exercised over real HTTP connections."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import os
import socket
import struct
import threading
import time
import unittest
from typing import Any, List
from unittest import mock

import agentplane
from agentplane.server import _Pump

from ._support import FakePlatform, events, invoke, iter_sse

WAIT = 5.0  # generous bound for "eventually"; tests normally finish far sooner


class ServerTest(unittest.TestCase):
    def setUp(self) -> None:
        # The server reads AGENTPLANE_URL/AGENTPLANE_AGENT_KEY; keep the
        # developer's shell out of the tests.
        patcher = mock.patch.dict(os.environ, {}, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop(agentplane.ENV_URL, None)
        os.environ.pop(agentplane.ENV_AGENT_KEY, None)

    def start(self, handler: Any, **kwargs: Any) -> agentplane.AgentServer:
        server = agentplane.AgentServer(handler, port=0, **kwargs).start()
        self.addCleanup(server.stop)
        return server

    # -- routes ------------------------------------------------------------

    def test_health_and_routes(self) -> None:
        server = self.start(lambda req: "x")
        self.assertNotEqual(server.port, 0)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        self.addCleanup(conn.close)

        conn.request("GET", "/health")
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertEqual(json.loads(resp.read()), {"ok": True})

        conn.request("GET", "/nope")
        resp = conn.getresponse()
        self.assertEqual(resp.status, 404)
        self.assertEqual(json.loads(resp.read())["error"]["code"], "not_found")

        conn.request("GET", "/invoke")
        resp = conn.getresponse()
        self.assertEqual(resp.status, 405)
        self.assertEqual(json.loads(resp.read())["error"]["code"], "method_not_allowed")

    def test_bad_body(self) -> None:
        server = self.start(lambda req: "x")
        for body in (b"{not json", b"[1, 2]"):
            with self.subTest(body=body):
                conn, resp = invoke(server.port, body)
                self.assertEqual(resp.status, 400)
                self.assertEqual(json.loads(resp.read())["error"]["code"], "bad_request")
                conn.close()

    def test_body_too_large(self) -> None:
        server = self.start(lambda req: "x", max_body_bytes=100)
        conn, resp = invoke(server.port, {"input_message": {"role": "user", "content": "x" * 200}})
        self.assertEqual(resp.status, 413)
        self.assertEqual(json.loads(resp.read())["error"]["code"], "payload_too_large")
        conn.close()

    # -- handler results ---------------------------------------------------

    def test_str_result(self) -> None:
        server = self.start(lambda req: "hello " + req.input_message["content"])
        self.assertEqual(events(server.port), [("delta", {"text": "hello hi"}), ("done", {"usage": {}})])

    def test_none_result(self) -> None:
        server = self.start(lambda req: None)
        self.assertEqual(events(server.port), [("done", {"usage": {}})])

    def test_generator_states_deltas_usage_in_order(self) -> None:
        def handler(req: agentplane.Request) -> Any:
            yield agentplane.State("thinking", {"step": 1})
            yield "a"
            yield ""  # dropped: an empty delta says nothing
            yield agentplane.State("writing")
            yield "b"
            req.usage = {"prompt_tokens": 3, "completion_tokens": 2}

        server = self.start(handler)
        self.assertEqual(
            events(server.port),
            [
                ("state", {"state": "thinking", "detail": {"step": 1}}),
                ("delta", {"text": "a"}),
                ("state", {"state": "writing", "detail": {}}),
                ("delta", {"text": "b"}),
                ("done", {"usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
            ],
        )

    def test_state_without_a_name_is_refused_to_the_handler(self) -> None:
        # The platform fails the run (agent_protocol_error, "state event
        # without a state") on a state event whose state is empty or not a
        # string: the SDK refuses it where it is made, so a handler may
        # catch it and its run goes on; nothing of it is sent.
        refused: List[str] = []

        def handler(req: agentplane.Request) -> Any:
            for bad in ("", None, 3):
                try:
                    yield agentplane.State(bad)  # type: ignore[arg-type]
                except ValueError as e:
                    refused.append(str(e))
            yield "still here"

        server = self.start(handler)
        self.assertEqual(events(server.port), [("delta", {"text": "still here"}), ("done", {"usage": {}})])
        self.assertEqual(len(refused), 3)

    def test_input_required(self) -> None:
        # yield, return and raise all end the turn asking; nothing after it
        # is sent; the request carries intention_id and resumes_run_id.
        seen: List[agentplane.Request] = []
        closed = threading.Event()

        def yielding(req: agentplane.Request) -> Any:
            seen.append(req)
            try:
                yield "Let me see. "
                yield agentplane.InputRequired("Which city?", {"choices": ["Paris"]})
                yield "never sent"
            finally:
                closed.set()

        body = {"agent_id": "w", "session_id": "s", "run_id": "r2", "input_message": {"role": "user", "content": "hi"},
                "intention_id": "int_1", "resumes_run_id": "r1"}
        server = self.start(yielding)
        self.assertEqual(
            events(server.port, body),
            [("delta", {"text": "Let me see. "}), ("input_required", {"question": "Which city?", "detail": {"choices": ["Paris"]}})],
        )
        self.assertTrue(closed.wait(WAIT), "the generator was not closed after InputRequired")
        self.assertEqual((seen[0].intention_id, seen[0].resumes_run_id), ("int_1", "r1"))

        def raising(req: agentplane.Request) -> Any:
            yield "x"
            raise agentplane.InputRequired("Which day?")

        for handler in (raising, lambda req: agentplane.InputRequired("Which city?")):
            with self.subTest(handler=handler):
                got = events(self.start(handler).port)
                self.assertEqual(got[-1][0], "input_required")
                self.assertNotIn("done", [e[0] for e in got])
        with self.assertRaises(ValueError):
            agentplane.InputRequired("  ")

    def test_generator_return_value_is_sent(self) -> None:
        # README: InputRequired "yielded, returned or raised"; a generator's
        # return value must not be dropped (the run would end done).
        def asks(req: agentplane.Request) -> Any:
            yield "Let me see. "
            return agentplane.InputRequired("Which one?")

        def says(req: agentplane.Request) -> Any:
            yield agentplane.State("thinking")
            return "the end"

        self.assertEqual(
            events(self.start(asks).port),
            [("delta", {"text": "Let me see. "}), ("input_required", {"question": "Which one?"})],
        )
        self.assertEqual(
            events(self.start(says).port),
            [("state", {"state": "thinking", "detail": {}}), ("delta", {"text": "the end"}), ("done", {"usage": {}})],
        )

    def test_iterable_result_and_unicode(self) -> None:
        server = self.start(lambda req: ["héllo ", "wörld\n", "✓"])
        self.assertEqual(
            events(server.port),
            [("delta", {"text": "héllo "}), ("delta", {"text": "wörld\n"}), ("delta", {"text": "✓"}), ("done", {"usage": {}})],
        )

    def test_long_text_is_split_into_events_the_platform_accepts(self) -> None:
        # The platform fails a run with agent_protocol_error on an SSE event
        # over 1 MiB. Worst cases per character: 4 bytes of UTF-8, a \u
        # escape for a control character, and — once a lone surrogate sends
        # the event through the ASCII fallback — 12 bytes for a non-BMP one.
        texts = ["é✓😀" * 300_000, "\x01" * 400_000, "\ud800" + "😀" * 200_000]
        server = self.start(lambda req: iter(texts))
        conn, resp = invoke(server.port)
        try:
            raw = resp.read()
        finally:
            conn.close()
        frames = [f for f in raw.split(b"\n\n") if f.strip()]
        for f in frames:
            self.assertLessEqual(len(f) + 2, 1 << 20)
        got = [(f.split(b"\n", 1)[0], json.loads(f.split(b"data: ", 1)[1])) for f in frames]
        self.assertEqual(got[-1], (b"event: done", {"usage": {}}))
        self.assertEqual("".join(d["text"] for e, d in got[:-1]), "".join(texts))
        self.assertTrue(all(e == b"event: delta" for e, _ in got[:-1]))

    def test_request_fields(self) -> None:
        seen: List[agentplane.Request] = []

        def handler(req: agentplane.Request) -> str:
            seen.append(req)
            return "ok"

        server = self.start(handler)
        body = {
            "agent_id": "echo",
            "session_id": "ses_9",
            "run_id": "run_9",
            "parent_run_id": "run_8",
            "input_message": {"role": "user", "content": "hi"},
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "context": {"user_id": "u9", "locale": "en"},
        }
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        events(server.port, body, {"traceparent": tp, "X-Custom": "yes"})
        req = seen[0]
        self.assertEqual((req.agent_id, req.session_id, req.run_id, req.parent_run_id), ("echo", "ses_9", "run_9", "run_8"))
        self.assertEqual(req.user_id, "u9")
        self.assertEqual(req.context, {"user_id": "u9", "locale": "en"})
        self.assertEqual(req.traceparent, tp)
        self.assertEqual(req.headers["x-custom"], "yes")
        self.assertEqual(req.input_message, {"role": "user", "content": "hi"})
        self.assertEqual(req.messages, body["messages"])
        self.assertFalse(req.has_client, "no platform URL configured, so no client")
        self.assertFalse(req.cancelled)
        with self.assertRaises(RuntimeError):
            req.openai_kwargs()

    # -- the platform client ------------------------------------------------

    def test_client_without_configuration_names_what_to_set(self) -> None:
        # Issue 8 item 18: req.client was None, and the README's tool example died with
        # AttributeError: 'NoneType' object has no attribute 'tools'.
        for kwargs, want, not_want in [
            ({}, ["AGENTPLANE_URL", "AGENTPLANE_AGENT_KEY", "platform_url=", "agent_api_key="], []),
            ({"platform_url": "http://127.0.0.1:1"}, ["AGENTPLANE_AGENT_KEY", "agent_api_key", "register"], ["AGENTPLANE_URL ("]),
            ({"agent_api_key": "ak_1"}, ["AGENTPLANE_URL"], ["AGENTPLANE_AGENT_KEY"]),
        ]:
            with self.subTest(kwargs=kwargs):
                errors: List[BaseException] = []

                def handler(req: agentplane.Request) -> str:
                    self.assertFalse(req.has_client)
                    try:
                        req.client.tools.invoke("demo.weather", {"city": "Paris"})
                    except agentplane.NotConfiguredError as e:
                        errors.append(e)
                        raise
                    return "unreachable"

                server = self.start(handler, **kwargs)
                evs = events(server.port, {"agent_id": "a", "session_id": "s", "run_id": "r", "input_message": {"role": "user", "content": "hi"}})
                self.assertEqual(len(errors), 1)
                msg = str(errors[0])
                for w in want:
                    self.assertIn(w, msg)
                for w in not_want:
                    self.assertNotIn(w, msg)
                self.assertIsInstance(errors[0], RuntimeError)
                self.assertEqual(evs[-1][0], "error")

    def test_client_with_configuration(self) -> None:
        seen: List[agentplane.Request] = []
        server = self.start(lambda req: seen.append(req) or "ok", platform_url="http://127.0.0.1:1", agent_api_key="ak_1")
        events(server.port, {"agent_id": "a", "session_id": "s", "run_id": "r", "input_message": {"role": "user", "content": "hi"}})
        req = seen[0]
        self.assertTrue(req.has_client)
        self.assertEqual((req.client.base_url, req.client.agent_api_key, req.client.run_id), ("http://127.0.0.1:1", "ak_1", "r"))

    def test_client_carries_the_traceparent(self) -> None:
        # The traceparent the agent was invoked with goes on with its platform
        # and LLM calls, so the platform's spans of them join the run's trace.
        seen: List[agentplane.Request] = []
        server = self.start(lambda req: seen.append(req) or "ok", platform_url="http://127.0.0.1:1", agent_api_key="ak_1")
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        events(server.port, {"agent_id": "a", "session_id": "s", "run_id": "r", "input_message": {"role": "user", "content": "hi"}}, {"traceparent": tp})
        c = seen[0].client
        self.assertEqual(c.headers(), {"x-run-id": "r", "x-session-id": "s", "traceparent": tp})
        self.assertEqual(c.openai_kwargs()["default_headers"]["traceparent"], tp)
        self.assertEqual(c.mcp_config()["headers"]["traceparent"], tp)
        # An agent with spans of its own sends its span's context instead.
        own = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
        self.assertEqual(c.bind(traceparent=own).headers()["traceparent"], own)
        self.assertEqual(c.bind(run_id="r2").traceparent, tp)

    # -- errors ------------------------------------------------------------

    def test_agent_error_after_delta(self) -> None:
        def handler(req: agentplane.Request) -> Any:
            yield "partial"
            raise agentplane.AgentError("bad_input", "no thanks")

        server = self.start(handler)
        self.assertEqual(
            events(server.port),
            [("delta", {"text": "partial"}), ("error", {"code": "bad_input", "message": "no thanks"})],
        )

    def test_exception_becomes_agent_exception(self) -> None:
        def handler(req: agentplane.Request) -> str:
            raise ValueError("boom")

        server = self.start(handler)
        with self.assertLogs("agentplane", "ERROR"):
            evs = events(server.port)
        self.assertEqual(len(evs), 1)
        self.assertEqual(evs[0][0], "error")
        self.assertEqual(evs[0][1]["code"], agentplane.CODE_AGENT_EXCEPTION)
        self.assertIn("ValueError: boom", evs[0][1]["message"])

    def test_long_error_message_keeps_its_code(self) -> None:
        # An event over 1 MiB would fail the run with agent_protocol_error
        # instead of the handler's code; the platform keeps 4 KiB anyway.
        def handler(req: agentplane.Request) -> str:
            raise agentplane.AgentError("too_much", "é" * (2 << 20))

        server = self.start(handler)
        evs = events(server.port)
        self.assertEqual(evs[0][0], "error")
        self.assertEqual(evs[0][1]["code"], "too_much")
        self.assertTrue(evs[0][1]["message"].startswith("éé"))
        self.assertLess(len(evs[0][1]["message"].encode("utf-8")), 64 << 10)

    def test_bad_yield_and_bad_usage(self) -> None:
        def bad_yield(req: agentplane.Request) -> Any:
            yield "ok"
            yield 42

        def bad_usage(req: agentplane.Request) -> str:
            req.usage = {"when": object()}
            return "ok"

        for handler in (bad_yield, bad_usage):
            with self.subTest(handler=handler.__name__):
                server = self.start(handler)
                with self.assertLogs("agentplane", "ERROR") if handler is bad_yield else contextlib.nullcontext():
                    evs = events(server.port)
                self.assertEqual(evs[0], ("delta", {"text": "ok"}))
                self.assertEqual(evs[-1][0], "error")
                self.assertEqual(evs[-1][1]["code"], agentplane.CODE_AGENT_EXCEPTION)
                self.assertEqual(len(evs), 2, "exactly one terminal event")

    # -- streaming behaviour ---------------------------------------------

    def test_each_event_is_flushed_before_the_next_is_produced(self) -> None:
        # The generator cannot produce its second delta until the test has
        # read the first one off the socket: without per-event flushing this
        # would time out.
        release = threading.Event()
        released_in_time: List[bool] = []

        def handler(req: agentplane.Request) -> Any:
            yield "first"
            released_in_time.append(release.wait(WAIT))
            yield "second"

        server = self.start(handler)
        conn, resp = invoke(server.port)
        self.addCleanup(conn.close)
        stream = iter_sse(resp)
        self.assertEqual(next(stream), ("delta", {"text": "first"}))
        release.set()
        self.assertEqual(next(stream), ("delta", {"text": "second"}))
        self.assertEqual(next(stream), ("done", {"usage": {}}))
        self.assertEqual(released_in_time, [True])

    def test_keepalive_while_silent(self) -> None:
        def handler(req: agentplane.Request) -> Any:
            yield "a"
            time.sleep(0.3)
            yield "b"

        server = self.start(handler, keepalive_interval=0.05)
        evs = events(server.port, comments=True)
        self.assertIn(("", ": keep-alive"), evs)
        self.assertEqual([e for e in evs if e[0]], [("delta", {"text": "a"}), ("delta", {"text": "b"}), ("done", {"usage": {}})])

    def test_connection_is_reused(self) -> None:
        server = self.start(lambda req: "x")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        self.addCleanup(conn.close)
        for _ in range(3):
            conn.request("POST", "/invoke", b"{}", {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertEqual([e for e in iter_sse(resp)], [("delta", {"text": "x"}), ("done", {"usage": {}})])

    def test_small_events_are_not_delayed(self) -> None:
        # Nagle's algorithm holds a small write until the previous one is
        # ACKed, and clients delay ACKs by up to 40 ms: on a reused
        # connection every run then took 40 ms more per burst of events.
        def handler(req: agentplane.Request) -> Any:
            yield agentplane.State("s")
            time.sleep(0.001)
            yield "x"
            time.sleep(0.001)
            yield "y"

        server = self.start(handler)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        self.addCleanup(conn.close)
        started = time.monotonic()
        for _ in range(10):
            conn.request("POST", "/invoke", b"{}", {"Content-Type": "application/json"})
            self.assertEqual(len(list(iter_sse(conn.getresponse()))), 4)
        self.assertLess(time.monotonic() - started, 0.2, "10 runs of 3 small events should take a few ms each")

    def test_chunked_request_body(self) -> None:
        server = self.start(lambda req: req.input_message["content"])
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        self.addCleanup(conn.close)
        parts = [b'{"input_message": ', b'{"role": "user", "content": "chunky"}}']
        conn.request("POST", "/invoke", iter(parts), {"Content-Type": "application/json"}, encode_chunked=True)
        self.assertEqual(list(iter_sse(conn.getresponse())), [("delta", {"text": "chunky"}), ("done", {"usage": {}})])

    # -- cancellation ------------------------------------------------------

    def _disconnect_after_first_delta(self, server: agentplane.AgentServer) -> None:
        conn, resp = invoke(server.port)
        self.assertEqual(next(iter_sse(resp)), ("delta", {"text": "first"}))
        conn.close()
        resp.close()

    def test_disconnect_closes_a_yielding_generator(self) -> None:
        finished = threading.Event()
        reqs: List[agentplane.Request] = []
        ticks: List[int] = []

        def gen(req: agentplane.Request) -> Any:
            try:
                yield "first"
                while True:
                    time.sleep(0.01)
                    ticks.append(1)
                    yield "tick"
            finally:
                finished.set()

        held: List[Any] = []

        def handler(req: agentplane.Request) -> Any:
            reqs.append(req)
            # Holding a reference keeps CPython's refcounting from closing
            # the generator for us: the server itself must close it.
            held.append(gen(req))
            return held[-1]

        server = self.start(handler)
        self._disconnect_after_first_delta(server)
        self.assertTrue(finished.wait(WAIT), "generator's finally did not run after the client left")
        self.assertTrue(reqs[0].cancelled)
        n = len(ticks)
        time.sleep(0.05)
        self.assertEqual(len(ticks), n, "generator kept running after it was closed")

    def test_disconnect_wakes_a_blocked_handler(self) -> None:
        finished = threading.Event()
        woke: List[bool] = []

        def handler(req: agentplane.Request) -> Any:
            try:
                yield "first"
                # Silent for long: no write will fail, so only watching the
                # socket can notice the disconnect.
                woke.append(req.wait_cancelled(30))
                if req.cancelled:
                    return
                yield "never"
            finally:
                finished.set()

        server = self.start(handler)
        self._disconnect_after_first_delta(server)
        self.assertTrue(finished.wait(WAIT), "handler was not woken by the disconnect")
        self.assertEqual(woke, [True])

    def test_client_reset_is_not_a_traceback(self) -> None:
        # A client that resets its connection mid-request (the platform
        # cancelling a run, a health checker giving up) is normal operation:
        # logged at debug level, without socketserver's traceback on stderr.
        server = self.start(lambda req: "x")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertLogs("agentplane", "DEBUG") as logs:
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(b"POST /invoke HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.1)  # the server is reading the headers
            # SO_LINGER 0: close with a RST, not a FIN.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and not any("ConnectionResetError" in r.getMessage() for r in logs.records):
                time.sleep(0.01)
        self.assertEqual(stderr.getvalue(), "")
        self.assertTrue(any(r.levelname == "DEBUG" and "ConnectionResetError" in r.getMessage() for r in logs.records), [r.getMessage() for r in logs.records])

    def test_other_server_errors_keep_their_traceback(self) -> None:
        server = self.start(lambda req: "x")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            try:
                raise ValueError("a bug in the server")
            except ValueError:
                server._httpd.handle_error(None, ("127.0.0.1", 1))
        self.assertIn("Traceback", stderr.getvalue())
        self.assertIn("ValueError: a bug in the server", stderr.getvalue())

    def test_stop_cancels_inflight_runs(self) -> None:
        started, finished = threading.Event(), threading.Event()

        def handler(req: agentplane.Request) -> Any:
            try:
                yield "first"
                started.set()
                req.wait_cancelled(30)
            finally:
                finished.set()

        server = agentplane.AgentServer(handler).start()
        conn, resp = invoke(server.port)
        self.addCleanup(conn.close)
        self.assertTrue(started.wait(WAIT))
        server.stop()
        server.stop()  # idempotent
        self.assertTrue(finished.wait(WAIT))

    def test_abort_between_wakeup_and_check_is_not_lost(self) -> None:
        # stop() aborting a stream while its pump is between select() and
        # draining the wake-up socket: the abort's wake-up is drained with
        # the event's, so the pump must notice the abort without another.
        a, b = socket.socketpair()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        cancelled = threading.Event()
        pump = _Pump(a, a.makefile("wb", buffering=0), 0, cancelled.set)  # no keep-alive: nothing else wakes it
        self.addCleanup(pump.close)
        real = pump._wake_r

        class AbortOnDrain:
            """The pump's wake-up socket, with stop() arriving just before the first drain."""

            fired = False

            def fileno(self) -> int:
                return real.fileno()

            def recv(self, n: int) -> bytes:
                if not AbortOnDrain.fired:
                    AbortOnDrain.fired = True
                    pump.abort()
                return real.recv(n)

            def close(self) -> None:
                real.close()

        pump._wake_r = AbortOnDrain()  # type: ignore[assignment]
        pump.put(b"data: first\n\n")
        result: List[bool] = []
        t = threading.Thread(target=lambda: result.append(pump.run()), daemon=True)
        t.start()
        t.join(WAIT)
        self.assertFalse(t.is_alive(), "the pump slept through the abort")
        self.assertEqual(result, [False])
        self.assertTrue(cancelled.is_set())

    # -- async handlers ----------------------------------------------------

    def test_async_handlers(self) -> None:
        async def coro(req: agentplane.Request) -> str:
            await asyncio.sleep(0)
            req.usage = {"n": 1}
            return "from coroutine"

        async def agen(req: agentplane.Request) -> Any:
            yield agentplane.State("thinking")
            await asyncio.sleep(0)
            yield "from async generator"

        async def failing(req: agentplane.Request) -> Any:
            yield "x"
            raise agentplane.AgentError("nope", "async failure")

        cases = [
            (coro, [("delta", {"text": "from coroutine"}), ("done", {"usage": {"n": 1}})]),
            (agen, [("state", {"state": "thinking", "detail": {}}), ("delta", {"text": "from async generator"}), ("done", {"usage": {}})]),
            (failing, [("delta", {"text": "x"}), ("error", {"code": "nope", "message": "async failure"})]),
        ]
        for handler, want in cases:
            with self.subTest(handler=handler.__name__):
                server = self.start(handler)
                self.assertEqual(events(server.port), want)

    def test_disconnect_cancels_async_handler(self) -> None:
        finished = threading.Event()
        outcome: List[str] = []

        async def handler(req: agentplane.Request) -> Any:
            try:
                yield "first"
                await asyncio.sleep(30)
                outcome.append("slept")
            except asyncio.CancelledError:
                outcome.append("cancelled")
                raise
            finally:
                finished.set()

        server = self.start(handler)
        self._disconnect_after_first_delta(server)
        self.assertTrue(finished.wait(WAIT), "async generator was not cancelled")
        self.assertEqual(outcome, ["cancelled"])

    # -- platform client inside a handler ---------------------------------

    def test_bound_client_and_openai_kwargs(self) -> None:
        platform = FakePlatform(
            {
                "POST /v1/sessions/ses_1/messages": lambda r: (200, {"message_id": "msg_1", "session_id": "ses_1", "run_id": "run_1", **r.body, "created_at": 1}),
            }
        )
        self.addCleanup(platform.close)
        kwargs: List[Any] = []

        def handler(req: agentplane.Request) -> str:
            assert req.client is not None
            stored = req.client.append_message("assistant", "noted")
            kwargs.append(req.openai_kwargs())
            kwargs.append(req.mcp_config())
            return stored["message_id"]

        server = self.start(handler, platform_url=platform.url + "/", agent_api_key="ak_1")
        self.assertEqual(events(server.port), [("delta", {"text": "msg_1"}), ("done", {"usage": {}})])
        rec = platform.requests[0]
        self.assertEqual(rec.headers["Authorization"], "Bearer ak_1")
        self.assertEqual(rec.headers["x-run-id"], "run_1")
        self.assertEqual(rec.headers["x-session-id"], "ses_1")
        self.assertEqual(rec.body, {"role": "assistant", "content": "noted"})
        self.assertEqual(
            kwargs[0],
            {"base_url": platform.url + "/v1", "api_key": "ak_1", "default_headers": {"x-run-id": "run_1", "x-session-id": "ses_1"}},
        )
        self.assertEqual(
            kwargs[1],
            {"url": platform.url + "/mcp", "headers": {"Authorization": "Bearer ak_1", "x-run-id": "run_1", "x-session-id": "ses_1"}},
        )

    def test_platform_config_from_env(self) -> None:
        os.environ[agentplane.ENV_URL] = "http://platform.invalid:8080"
        os.environ[agentplane.ENV_AGENT_KEY] = "ak_env"
        seen: List[agentplane.Request] = []
        server = self.start(lambda req: seen.append(req))
        events(server.port)
        client = seen[0].client
        assert client is not None
        self.assertEqual((client.base_url, client.agent_api_key, client.run_id, client.session_id, client.agent_id),
                         ("http://platform.invalid:8080", "ak_env", "run_1", "ses_1", "echo"))


if __name__ == "__main__":
    unittest.main()


class EncodeEventTest(unittest.TestCase):
    def test_lone_surrogate_is_escaped_not_an_error(self) -> None:
        # Text echoed from JSON input may hold a lone surrogate, which has
        # no UTF-8 form; the event carries it as a \u escape.
        from agentplane._sse import encode_event

        raw = encode_event("delta", {"text": "a\ud800b é"})
        data = raw.split(b"data: ", 1)[1].strip()
        self.assertEqual(json.loads(data.decode("ascii")), {"text": "a\ud800b é"})
        # Ordinary text stays UTF-8, unescaped.
        self.assertIn("é".encode("utf-8"), encode_event("delta", {"text": "é"}))
