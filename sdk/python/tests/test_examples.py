"""examples/python/echo_agent.py as a real child process against a fake platform."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import unittest
from typing import List

from ._support import FakePlatform, events

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python", "echo_agent.py")


@unittest.skipUnless(os.path.exists(EXAMPLE), "examples/python is not in this checkout")
class EchoAgentExampleTest(unittest.TestCase):
    def test_registers_reads_transcript_and_streams_words(self) -> None:
        platform = FakePlatform(
            {
                "POST /v1/agents/register": lambda r: (200, {"ok": True, "agent_id": r.body["agent_id"], "agent_api_key": "ak_echo"}),
                "GET /v1/sessions/ses_1/messages": lambda r: (
                    200,
                    {"messages": [{"message_id": "m1", "role": "user", "content": "earlier"}, {"message_id": "m2", "role": "user", "content": "hi"}], "next_before": None},
                ),
            }
        )
        self.addCleanup(platform.close)
        env = dict(os.environ, AGENTPLANE_URL=platform.url, AGENTPLANE_ADMIN_KEY="admin_1")
        env.pop("AGENTPLANE_AGENT_KEY", None)
        # Run from another directory: the example must find the SDK by itself.
        proc = subprocess.Popen(
            [sys.executable, EXAMPLE, "--port", "0"], env=env, cwd="/", stderr=subprocess.PIPE, text=True
        )
        assert proc.stderr is not None
        self.addCleanup(proc.stderr.close)
        self.addCleanup(proc.wait, 10)
        self.addCleanup(proc.terminate)
        port = self._wait_for_port(proc)

        body = {
            "agent_id": "echo",
            "session_id": "ses_1",
            "run_id": "run_1",
            "input_message": {"role": "user", "content": "hi there"},
            "messages": [],
            "context": {"user_id": "u1"},
        }
        started = time.monotonic()
        evs = events(port, body)
        elapsed = time.monotonic() - started

        self.assertEqual(evs[0], ("state", {"state": "thinking", "detail": {"step": "reading the transcript"}}))
        deltas = [d["text"] for e, d in evs if e == "delta"]
        self.assertEqual("".join(deltas), "Hello u1! You said: hi there (this session has 2 messages so far)")
        self.assertEqual(deltas[:2], ["Hello", " u1!"], "one delta per word")
        self.assertEqual(evs[-1], ("done", {"usage": {"words": len(deltas)}}))
        self.assertGreater(elapsed, 0.04 * (len(deltas) - 1), "words should be paced, not sent at once")

        register = platform.requests[0]
        self.assertEqual(register.path, "/v1/agents/register")
        self.assertEqual(register.headers["Authorization"], "Bearer admin_1")
        self.assertEqual(register.body["endpoint"], f"http://127.0.0.1:{port}")
        self.assertTrue(register.body["rotate_key"], "no saved agent key, so the example asks for a fresh one")
        transcript = platform.requests[1]
        self.assertEqual(transcript.headers["Authorization"], "Bearer ak_echo")
        self.assertEqual((transcript.headers["x-run-id"], transcript.headers["x-session-id"]), ("run_1", "ses_1"))

    def _wait_for_port(self, proc: "subprocess.Popen[str]") -> int:
        found: List[int] = []
        ready = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m and not found:
                    found.append(int(m.group(1)))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(10) or not found:
            self.fail(f"echo agent did not start (exit code {proc.poll()})")
        return found[0]


if __name__ == "__main__":
    unittest.main()
