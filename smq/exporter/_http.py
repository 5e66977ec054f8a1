"""The exporter's HTTP server: ``/metrics`` for Prometheus, ``/healthz`` for probes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

_INDEX = b'smq exporter: metrics at <a href="/metrics">/metrics</a>\n'


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes would flood the log
        pass


def make_app(registry: Any) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    """A WSGI app serving ``registry`` at ``/metrics``, and ``/healthz`` (the process answers)."""
    from prometheus_client import make_wsgi_app

    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_INDEX]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics\n"]

    return app


class MetricsServer:
    """A threaded HTTP server for a registry, started in a background thread."""

    def __init__(self, registry: Any, host: str, port: int) -> None:
        server_class = _Server6 if ":" in host else _Server
        self._server = make_server(host, port, make_app(registry), server_class, _QuietHandler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="smq-exporter-http", daemon=True
        )

    @property
    def port(self) -> int:
        """The port it listens on (useful when asked for port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
