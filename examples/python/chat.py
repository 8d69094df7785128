#!/usr/bin/env python3
"""A terminal chat client for agentplane's WebSocket channel (DESIGN §4).

Standard library only: a minimal WebSocket client (RFC 6455) is included
below, so this runs anywhere Python 3.9+ does::

    python3 examples/python/chat.py --user demo --api-key KEY --agent echo
    python3 examples/python/chat.py --user demo --api-key KEY --agent echo "hello there"

With messages on the command line it sends each one in turn and exits;
otherwise it reads one message per line from stdin. The session is kept
across messages, so the agent sees the transcript grow.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import sys
import time
import uuid
from typing import Any, Dict, Iterator, Optional, Tuple
from urllib.parse import urlsplit

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WebSocket:
    """Just enough of a WebSocket client for JSON text frames."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        u = urlsplit(url)
        if u.scheme not in ("ws", "wss"):
            raise ValueError(f"not a ws:// or wss:// URL: {url}")
        port = u.port or (443 if u.scheme == "wss" else 80)
        sock = socket.create_connection((u.hostname, port), timeout=timeout)
        if u.scheme == "wss":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
        self._sock = sock
        self._rfile = sock.makefile("rb")
        key = base64.b64encode(os.urandom(16)).decode()
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        status = self._rfile.readline().decode("latin-1").strip()
        headers: Dict[str, str] = {}
        while True:
            line = self._rfile.readline().decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if not status.startswith("HTTP/1.1 101"):
            raise ConnectionError(f"WebSocket handshake refused: {status}")
        want = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != want:
            raise ConnectionError("WebSocket handshake: bad Sec-WebSocket-Accept")
        sock.settimeout(None)  # replies may take as long as the agent does

    def send_json(self, obj: Any) -> None:
        self._send(0x1, json.dumps(obj).encode("utf-8"))

    def _send(self, opcode: int, payload: bytes) -> None:
        # Client frames must be masked (RFC 6455 §5.3).
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._sock.sendall(head + mask + masked)

    def _read_frame(self) -> Tuple[bool, int, bytes]:
        b1, b2 = self._read(2)
        n = b2 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._read(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._read(8))
        mask = self._read(4) if b2 & 0x80 else b""
        payload = self._read(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(b1 & 0x80), b1 & 0x0F, payload

    def _read(self, n: int) -> bytes:
        data = self._rfile.read(n)
        if len(data) < n:
            raise ConnectionError("connection closed")
        return data

    def messages(self) -> Iterator[Any]:
        """Yield decoded JSON text messages until the server closes."""
        buf, op = b"", 0
        while True:
            fin, opcode, payload = self._read_frame()
            if opcode == 0x8:  # close: answer it, then stop
                try:
                    self._send(0x8, payload[:2])
                except OSError:
                    pass
                return
            if opcode == 0x9:  # ping
                self._send(0xA, payload)
                continue
            if opcode == 0xA:  # pong
                continue
            if opcode != 0x0:
                buf, op = b"", opcode
            buf += payload
            if fin:
                if op == 0x1:
                    yield json.loads(buf.decode("utf-8"))
                buf = b""

    def close(self) -> None:
        try:
            self._send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        self._sock.close()


def _ws_url(base: str) -> str:
    u = urlsplit(base)
    scheme = {"http": "ws", "https": "wss"}.get(u.scheme, u.scheme)
    return f"{scheme}://{u.netloc}/v1/ws"


def _now_ms() -> int:
    return int(time.time() * 1000)


def chat_once(ws: WebSocket, incoming: Iterator[Any], agent: str, text: str, session_id: Optional[str]) -> Tuple[Optional[str], bool]:
    """Send one message and print the reply as it streams; returns the session
    id, and whether the message was answered (not refused, the run not failed)."""
    request_id = "req_" + uuid.uuid4().hex[:12]
    msg: Dict[str, Any] = {"type": "agent_invoke", "ts": _now_ms(), "request_id": request_id, "agent_id": agent, "message": {"role": "user", "content": text}}
    if session_id:
        msg["session_id"] = session_id
    ws.send_json(msg)
    run_id = None
    for m in incoming:
        t = m.get("type")
        if m.get("request_id") == request_id and t == "error" and not m.get("seq"):
            print(f"! {m.get('code')}: {m.get('message')}")  # refused before a run started
            return session_id, False
        if t == "run_started" and (m.get("request_id") == request_id or run_id is None):
            run_id = m.get("run_id")
            session_id = m.get("session_id") or session_id
            continue
        if run_id is None or m.get("run_id") != run_id:
            continue  # another run's events (replay, another tab)
        if t == "delta":
            print(m.get("text", ""), end="", flush=True)
        elif t == "state":
            detail = m.get("detail") or {}
            print(f"[{m.get('state')}{(' ' + json.dumps(detail)) if detail else ''}] ", end="", flush=True)
            # Only the platform's states are the run's; an agent may name its own anything.
            if m.get("source") == "platform" and m.get("state") == "CANCELLED":
                print()
                return session_id, False
        elif t == "done":
            print(f"\n  (done, usage {json.dumps(m.get('usage') or {})})")
            return session_id, True
        elif t == "error":
            print(f"\n! {m.get('code')}: {m.get('message')}")
            return session_id, False
        elif t == "input_required":
            # The agent asks the user: the run is over, and the session's
            # next message (the next line typed) answers it.
            print(f"\n? {m.get('question')}")
            return session_id, True
        elif t in ("tool_request", "approval_required"):
            print(f"\n  ({t}: {json.dumps(m)})")
    raise ConnectionError("server closed the connection")


def main() -> int:
    p = argparse.ArgumentParser(description="Chat with an agent through agentplane.")
    p.add_argument("--url", default=os.environ.get("AGENTPLANE_URL", "http://127.0.0.1:8080"), help="platform base URL (default $AGENTPLANE_URL or http://127.0.0.1:8080)")
    p.add_argument("--user", required=True, help="user id (from AGENTPLANE_API_KEYS or the key printed by --demo)")
    p.add_argument("--api-key", required=True, help="that user's client key")
    p.add_argument("--agent", default="echo", help="agent id to talk to (default echo)")
    p.add_argument("--session", help="continue this session instead of starting a new one")
    p.add_argument("message", nargs="*", help="messages to send; none: read them from stdin")
    args = p.parse_args()

    ws = WebSocket(_ws_url(args.url))
    incoming = ws.messages()
    try:
        ws.send_json({"type": "hello", "ts": _now_ms(), "user_id": args.user, "api_key": args.api_key})
        first = next(incoming)
        if first.get("type") != "ready":
            print(f"! hello refused: {first.get('code')}: {first.get('message')}", file=sys.stderr)
            return 1
        session = args.session
        lines = args.message or _stdin_lines()
        failed = 0
        for text in lines:
            session, ok = chat_once(ws, incoming, args.agent, text, session)
            failed += 0 if ok else 1
        if session:
            print(f"(session {session})", file=sys.stderr)
        return 1 if failed else 0  # a refusal or a failed run is worth a non-zero exit
    except (ConnectionError, StopIteration) as e:
        print(f"! connection lost: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        ws.close()


def _stdin_lines() -> Iterator[str]:
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            yield line.strip()


if __name__ == "__main__":
    sys.exit(main())
