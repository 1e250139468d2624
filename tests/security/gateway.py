"""An https gateway with auth in front of a real server (the tests' Apicurio registry, a Kafka
Connect worker): what a company puts before such a service when the service's own TLS or auth
is not at hand. It checks the Authorization header and forwards GETs upstream."""

from __future__ import annotations

import contextlib
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.security.pki import Pki


@contextlib.contextmanager
def tls_gateway(pki: Pki, upstream: str, allowed: set[str],
                upstream_context: ssl.SSLContext | None = None) -> Iterator[str]:
    """https://127.0.0.1:<port> (the tests' CA signed its certificate) answering 401 unless
    the request's Authorization header is one of ``allowed``; other GETs go to ``upstream``
    (its answer, error statuses included, passed back as JSON); yields the URL."""

    class Gateway(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.headers.get("Authorization") not in allowed:
                self.send_response(401)
                self.end_headers()
                return
            request = urllib.request.Request(upstream + self.path,
                                             headers={"Accept": self.headers.get("Accept", "")})
            try:
                with urllib.request.urlopen(request, timeout=10,
                                            context=upstream_context) as answer:
                    status, body = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
