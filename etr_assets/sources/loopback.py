"""An HTTP server on loopback serving from its own thread, for the synthetic APIs: made, it serves; `stop()` or
leaving its `with` block shuts it down once, waking requests that sleep on `stopping`."""

from __future__ import annotations

import http.server
import json
import sys
import threading


class LoopbackServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # listen backlog; the default 5 drops bursts of parallel clients for a second

    def __init__(self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler], name: str):
        self._lock, self._stopped = threading.Lock(), False
        self.stopping = threading.Event()  # wakes requests sleeping for a configured delay when the server stops
        super().__init__(address, handler)  # bound and listening here: connections queue until served
        host, port = self.server_address[:2]
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name=f"{name}-{port}", daemon=True
        )
        self._thread.start()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # the client hung up (e.g. timed out waiting for a delayed answer): nothing to report
        super().handle_error(request, client_address)

    def stop(self) -> None:
        with self._lock:
            stopped, self._stopped = self._stopped, True
        if not stopped:
            self.stopping.set()
            self.shutdown()
            self.server_close()
            self._thread.join()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """Answers in JSON, and logs nothing: tests and runs read stderr."""

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        pass

    def send_json(self, code: int, body: dict, headers: dict | None = None, cut_off: bool = False) -> None:
        """``cut_off``: a mid-download failure, the headers promise the whole body, half is sent, the connection
        closes (the handler's thread lives on)."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(payload)), **(headers or {})}
        for name, value in (headers | {"Connection": "close"} if cut_off else headers).items():
            self.send_header(name, value)  # Connection: close also sets close_connection
        self.end_headers()
        self.wfile.write(payload[: len(payload) // 2] if cut_off else payload)
