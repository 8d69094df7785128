"""Test helpers: an SSE reader and a fake platform that speaks the real wire format."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit


def iter_sse(resp: http.client.HTTPResponse) -> Iterator[Tuple[str, Any]]:
    """Yield (event, data) pairs as they arrive; comment lines come as ("", ": comment")."""
    event, data = "", []  # type: str, List[str]
    while True:
        raw = resp.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if event or data:
                yield event or "message", json.loads("\n".join(data))
            event, data = "", []
        elif line.startswith(":"):
            yield "", line
        elif line.startswith("event:"):
            event = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):].lstrip())


def invoke(port: int, body: Any = None, headers: Optional[Dict[str, str]] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """POST /invoke and return the open connection and response (caller closes)."""
    if body is None:
        body = {
            "agent_id": "echo",
            "session_id": "ses_1",
            "run_id": "run_1",
            "input_message": {"role": "user", "content": "hi"},
            "messages": [{"role": "user", "content": "hi"}],
            "context": {"user_id": "u1"},
        }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = {"Content-Type": "application/json", "x-run-id": "run_1", "x-session-id": "ses_1"}
    h.update(headers or {})
    conn.request("POST", "/invoke", raw, h)
    return conn, conn.getresponse()


def events(port: int, body: Any = None, headers: Optional[Dict[str, str]] = None, comments: bool = False) -> List[Tuple[str, Any]]:
    """Invoke and return every event of the stream (comments only if asked)."""
    conn, resp = invoke(port, body, headers)
    try:
        assert resp.status == 200, (resp.status, resp.read())
        assert resp.getheader("Content-Type") == "text/event-stream", resp.getheader("Content-Type")
        return [e for e in iter_sse(resp) if comments or e[0]]
    finally:
        conn.close()


class Recorded:
    """One request the fake platform received."""

    def __init__(self, method: str, path: str, query: Dict[str, List[str]], headers: Any, body: Any) -> None:
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body


Responder = Callable[[Recorded], Tuple[int, Any]]


class FakePlatform:
    """A real HTTP server standing in for the platform.

    ``routes`` maps "METHOD /raw/path" to a responder returning (status, body)
    or (status, body, headers); a body of bytes is sent verbatim, anything
    else as JSON; headers (e.g. another Content-Type) are added; status 0
    closes the connection without an answer (after writing a body of bytes
    verbatim: an answer cut short). Unknown routes get the platform's 404
    error shape.
    """

    def __init__(self, routes: Dict[str, Responder]) -> None:
        self.routes = routes
        self.requests: List[Recorded] = []
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                u = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                rec = Recorded(self.command, u.path, parse_qs(u.query), self.headers, json.loads(raw) if raw else None)
                fake.requests.append(rec)
                responder = fake.routes.get(f"{self.command} {u.path}")
                extra: Dict[str, str] = {}
                if responder is None:
                    status, body = 404, {"error": {"code": "not_found", "message": f"no route {self.command} {u.path}"}}
                else:
                    answer = responder(rec)
                    status, body = answer[0], answer[1]
                    if len(answer) > 2:
                        extra = dict(answer[2])
                if status == 0:
                    # Drop the connection without an answer, as a crashing
                    # server or a restarting proxy would; a body of bytes is
                    # written verbatim first (an answer cut short).
                    if isinstance(body, bytes):
                        self.wfile.write(body)
                    self.close_connection = True
                    return
                out = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", extra.pop("Content-Type", "application/json"))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()
