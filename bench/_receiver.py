"""A webhook receiver for bench/webhooks.py: `python _receiver.py PORT DELAY` answers every POST
with 200 after DELAY seconds; GET /stats says how many POSTs came, and when the first and the
last arrived (time.time())."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PORT, DELAY = int(sys.argv[1]), float(sys.argv[2])
lock = threading.Lock()
seen: dict[str, Any] = {"count": 0, "first": None, "last": None}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        now = time.time()
        with lock:
            seen["count"] += 1
            seen["first"] = seen["first"] or now
            seen["last"] = now
        if DELAY:
            time.sleep(DELAY)
        self._answer(b'{"ok":true}')

    def do_GET(self) -> None:
        with lock:
            body = json.dumps(seen).encode()
        self._answer(body)

    def _answer(self, body: bytes) -> None:
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, message: str, *args: Any) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True
server.serve_forever()
