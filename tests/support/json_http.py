"""The HTTP side of the tests' fake Google APIs: JSON in, JSON out, on loopback."""

from __future__ import annotations

import http.server
import json
from collections.abc import Callable
from typing import Any

#: (the request handler, method, parsed JSON body or None) -> (status, JSON answer).
Respond = Callable[[http.server.BaseHTTPRequestHandler, str, Any], tuple[int, Any]]


class DropConnection(Exception):
    """Raised by `respond`: the connection is closed without an answer, as a reset or a
    load balancer dropping it would leave the client."""


def json_handler(respond: Respond) -> type[http.server.BaseHTTPRequestHandler]:
    """A request handler class that answers GET, POST and PUT with `respond`'s JSON."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                status, answer = respond(self, method,
                                         json.loads(raw) if raw.strip() else None)
            except DropConnection:
                self.close_connection = True
                return
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_PUT(self):
            self._serve("PUT")

        def do_PATCH(self):
            self._serve("PATCH")

        def log_message(self, *args):
            pass

    return Handler
