"""The platform client against a real HTTP server that checks what it receives."""

from __future__ import annotations

import os
import socket
import unittest
from typing import Any, Dict
from unittest import mock

import agentplane

from ._support import FakePlatform, Recorded


def ok(body: Any, status: int = 200) -> Any:
    return lambda rec: (status, body)


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        patcher = mock.patch.dict(os.environ, {}, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop(agentplane.ENV_URL, None)
        os.environ.pop(agentplane.ENV_AGENT_KEY, None)

    def platform(self, routes: Dict[str, Any]) -> FakePlatform:
        p = FakePlatform(routes)
        self.addCleanup(p.close)
        return p

    def client(self, p: FakePlatform, **kw: Any) -> agentplane.Client:
        return agentplane.Client(p.url, "ak_1", run_id="run_1", session_id="ses_1", **kw)

    def assert_attributed(self, rec: Recorded) -> None:
        self.assertEqual(rec.headers["Authorization"], "Bearer ak_1")
        self.assertEqual(rec.headers["x-run-id"], "run_1")
        self.assertEqual(rec.headers["x-session-id"], "ses_1")

    def test_heartbeat(self) -> None:
        p = self.platform({"POST /v1/agents/echo:heartbeat": ok({"ok": True})})
        self.assertEqual(self.client(p, agent_id="echo").heartbeat(), {"ok": True})
        self.assert_attributed(p.requests[0])
        with self.assertRaises(ValueError):
            self.client(p).heartbeat()

    def test_messages_and_append(self) -> None:
        page = {"messages": [{"message_id": "m2", "session_id": "ses 1", "run_id": "", "role": "user", "content": "hi", "created_at": 5}], "next_before": "m2"}
        stored = {"message_id": "m3", "session_id": "ses 1", "run_id": "run_1", "role": "assistant", "content": "yo", "created_at": 6}
        # The session id has a space: it must travel escaped in the path.
        p = self.platform({"GET /v1/sessions/ses%201/messages": ok(page), "POST /v1/sessions/ses%201/messages": ok(stored)})
        c = self.client(p)

        self.assertEqual(c.messages("ses 1", limit=10, before="m9"), page)
        rec = p.requests[-1]
        self.assertEqual(rec.method, "GET")
        self.assertEqual(rec.query, {"limit": ["10"], "before": ["m9"]})
        self.assert_attributed(rec)

        c.messages("ses 1")
        self.assertEqual(p.requests[-1].query, {}, "no limit/before unless given")

        self.assertEqual(c.append_message("assistant", "yo", session_id="ses 1"), stored)
        rec = p.requests[-1]
        self.assertEqual(rec.body, {"role": "assistant", "content": "yo"})
        self.assertEqual(rec.headers["Content-Type"], "application/json")
        self.assert_attributed(rec)

    def test_messages_default_to_bound_session(self) -> None:
        p = self.platform({"GET /v1/sessions/ses_1/messages": ok({"messages": [], "next_before": None})})
        self.assertEqual(self.client(p).messages()["messages"], [])
        with self.assertRaises(ValueError):
            agentplane.Client(p.url, "ak_1").messages()

    def test_transcript_pages_back_to_the_start(self) -> None:
        def msg(i: int) -> Dict[str, Any]:
            return {"message_id": f"m{i}", "session_id": "ses_1", "run_id": "", "role": "user", "content": str(i), "created_at": i}

        # Five messages, pages of two, oldest first within a page.
        def list_messages(rec: Recorded) -> Any:
            before = int(rec.query.get("before", ["m6"])[0][1:])
            limit = int(rec.query["limit"][0])
            ids = [i for i in range(1, 6) if i < before][-limit:]
            return 200, {"messages": [msg(i) for i in ids], "next_before": f"m{ids[0]}" if ids and ids[0] > 1 else None}

        p = self.platform({"GET /v1/sessions/ses_1/messages": list_messages})
        got = self.client(p).transcript(page_size=2)
        self.assertEqual([m["message_id"] for m in got], ["m1", "m2", "m3", "m4", "m5"])
        self.assertEqual(len(p.requests), 3)

    def test_transcript_stops_on_a_stuck_cursor(self) -> None:
        p = self.platform({"GET /v1/sessions/ses_1/messages": ok({"messages": [{"message_id": "m1"}], "next_before": "m1"})})
        self.assertEqual(len(self.client(p).transcript()), 2)
        self.assertEqual(len(p.requests), 2)

    def test_context_put_and_get(self) -> None:
        p = self.platform(
            {
                "PUT /v1/context/notes%2Fuser%201": ok({"key": "notes/user 1", "version": 3, "created_at": 7}),
                "GET /v1/context/notes%2Fuser%201": ok({"key": "notes/user 1", "version": 2, "data": {"a": [1]}, "created_at": 6}),
            }
        )
        c = self.client(p)
        self.assertEqual(c.context_put("notes/user 1", {"a": [1]})["version"], 3)
        self.assertEqual(p.requests[-1].body, {"data": {"a": [1]}})
        self.assert_attributed(p.requests[-1])

        c.context_put("notes/user 1", None, if_version=0)
        self.assertEqual(p.requests[-1].body, {"data": None, "if_version": 0}, "if_version 0 (must not exist) is sent")

        self.assertEqual(c.context_get("notes/user 1", version=2)["data"], {"a": [1]})
        self.assertEqual(p.requests[-1].query, {"version": ["2"]})
        c.context_get("notes/user 1")
        self.assertEqual(p.requests[-1].query, {})

    def test_api_errors(self) -> None:
        p = self.platform(
            {
                "PUT /v1/context/k": ok({"error": {"code": "version_conflict", "message": "latest is 4"}}, 409),
                "GET /v1/context/k": ok(b"<html>bad gateway</html>", 502),
            }
        )
        c = self.client(p)
        with self.assertRaises(agentplane.APIError) as cm:
            c.context_put("k", 1, if_version=3)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.message), (409, "version_conflict", "latest is 4"))

        with self.assertRaises(agentplane.APIError) as cm:
            c.context_get("k")
        self.assertEqual((cm.exception.status, cm.exception.code), (502, "http_502"))
        self.assertIn("bad gateway", cm.exception.message)

        with self.assertRaises(agentplane.APIError) as cm:
            c.messages()  # unknown route on the fake: the platform's 404 shape
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))

    def test_connection_error(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again below: nothing listens there
        c = agentplane.Client(f"http://127.0.0.1:{port}", "ak_1", timeout=5)
        with self.assertRaises(agentplane.APIError) as cm:
            c.heartbeat("echo")
        self.assertEqual((cm.exception.status, cm.exception.code), (0, "connection_error"))

    def test_answer_cut_short_is_an_api_error(self) -> None:
        # README: failures raise APIError. A body that breaks off
        # (IncompleteRead), a 4xx's included, is a connection error.
        cut = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{"ok":'
        cut4xx = b'HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{"error":'
        p = self.platform({"POST /v1/agents/echo:heartbeat": lambda rec: (0, cut), "GET /v1/context/k": lambda rec: (0, cut4xx)})
        c = self.client(p, agent_id="echo")
        for call in (c.heartbeat, lambda: c.context_get("k")):
            with self.assertRaises(agentplane.APIError) as cm:
                call()
            self.assertEqual((cm.exception.status, cm.exception.code), (0, "connection_error"))
            self.assertIn("IncompleteRead", cm.exception.message)

    def test_header_that_http_cannot_carry_is_an_api_error(self) -> None:
        # http.client sends header values as Latin-1: an agent key or a
        # traceparent with other characters cannot be sent. That is the
        # documented APIError (not a raw UnicodeEncodeError), and nothing
        # is sent.
        p = self.platform({"POST /v1/agents/echo:heartbeat": ok({"ok": True})})
        for c in (agentplane.Client(p.url, "ak_\u2013pasted", agent_id="echo"), self.client(p, agent_id="echo").bind(traceparent="00-\u2603")):
            with self.assertRaises(agentplane.APIError) as cm:
                c.heartbeat()
            self.assertEqual((cm.exception.status, cm.exception.code), (0, "invalid_request"))
        self.assertEqual(p.requests, [])

    def test_register(self) -> None:
        p = self.platform({"POST /v1/agents/register": ok({"ok": True, "agent_id": "echo", "agent_api_key": "ak_new"})})
        got = agentplane.register(p.url, "admin_1", "echo", "Echo", "http://127.0.0.1:9001", capabilities=["chat"])
        self.assertEqual(got["agent_api_key"], "ak_new")
        rec = p.requests[-1]
        self.assertEqual(rec.headers["Authorization"], "Bearer admin_1")
        self.assertIsNone(rec.headers["x-run-id"])
        self.assertEqual(rec.body, {"agent_id": "echo", "name": "Echo", "endpoint": "http://127.0.0.1:9001", "capabilities": ["chat"]})

        agentplane.register(p.url, "admin_1", "echo", "Echo", "http://127.0.0.1:9001", linked_agents=("helper",), rotate_key=True)
        self.assertEqual(
            p.requests[-1].body,
            {"agent_id": "echo", "name": "Echo", "endpoint": "http://127.0.0.1:9001", "capabilities": [], "linked_agents": ["helper"], "rotate_key": True},
        )

    def test_openai_kwargs_and_env(self) -> None:
        os.environ[agentplane.ENV_URL] = "http://platform.example:8080/"
        os.environ[agentplane.ENV_AGENT_KEY] = "ak_env"
        c = agentplane.Client(run_id="run_1", session_id="ses_1")
        self.assertEqual(
            c.openai_kwargs(),
            {"base_url": "http://platform.example:8080/v1", "api_key": "ak_env", "default_headers": {"x-run-id": "run_1", "x-session-id": "ses_1"}},
        )
        self.assertNotIn("ak_env", repr(c), "the key must not leak into logs")
        bound = c.bind(run_id="run_2")
        self.assertEqual((bound.run_id, bound.session_id, bound.agent_api_key), ("run_2", "ses_1", "ak_env"))
        self.assertEqual(
            bound.mcp_config(),
            {"url": "http://platform.example:8080/mcp", "headers": {"Authorization": "Bearer ak_env", "x-run-id": "run_2", "x-session-id": "ses_1"}},
        )

    def test_unbound_client_sends_no_attribution_headers(self) -> None:
        p = self.platform({"POST /v1/agents/echo:heartbeat": ok({"ok": True})})
        agentplane.Client(p.url, "ak_1").heartbeat("echo")
        rec = p.requests[-1]
        self.assertIsNone(rec.headers["x-run-id"])
        self.assertIsNone(rec.headers["x-session-id"])

    def test_missing_url(self) -> None:
        with self.assertRaises(ValueError):
            agentplane.Client()
        with self.assertRaises(ValueError):
            agentplane.register(None, "admin", "a", "A", "http://x")


if __name__ == "__main__":
    unittest.main()
