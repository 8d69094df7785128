"""Server-sent events framing for the /invoke stream (DESIGN §5)."""

from __future__ import annotations

import json
from typing import Any

# A comment line: ignored by SSE parsers, but it resets the platform's idle
# timer while a handler is silent (a long LLM or tool call).
KEEPALIVE = b": keep-alive\n\n"


def encode_event(event: str, data: Any) -> bytes:
    """Return one SSE event with ``data`` as compact JSON.

    Raises ``TypeError``/``ValueError`` if ``data`` is not JSON-serialisable;
    callers encode before queueing so the failure surfaces in the handler's
    thread as an ``error`` event rather than killing the stream.
    """
    # json.dumps never emits a raw newline without indent, so the payload is
    # always a single data: line.
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        raw = payload.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate ("\ud800", e.g. text echoed from a JSON input)
        # has no UTF-8 form: written as a \u escape it is still valid JSON.
        raw = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")
    return b"event: " + event.encode("ascii") + b"\ndata: " + raw + b"\n\n"
