"""A real S3-compatible server for the tests (moto's ThreadedMotoServer on a free port) and a
TCP proxy in front of it that records each request line and can cut a connection mid-reply."""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

BUCKET = "corpus"
KEY_ID, SECRET = "packlm-test-key", "packlm-secret-4f1c9e2ab7d35c80"
"""The test credentials: the secret must appear in none of a run's files."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proxy:
    """Forwards 127.0.0.1:port -> 127.0.0.1:target. `cut_after`: the next `cuts` connections
    answering a GET of an object with "cut" in its key are closed after that many reply bytes."""

    target: int
    cut_after: int = 0
    cuts: int = 0
    requests: list[str] = field(default_factory=list)
    """The first line of every request ("GET /corpus/a.jsonl?... HTTP/1.1")."""
    port: int = 0

    def start(self) -> Proxy:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.close()

    def gets(self, key_part: str = "") -> list[str]:
        """The object GETs (not listings) whose path holds `key_part`."""
        return [
            r for r in self.requests
            if r.startswith("GET ") and "list-type" not in r and key_part in r.split(" ")[1]
        ]  # fmt: skip

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        cut = [False]

        def up() -> None:
            while data := _recv(client):
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                if line.split(" ")[0] in ("GET", "HEAD", "PUT", "POST", "DELETE"):
                    self.requests.append(line)
                    if line.startswith("GET ") and "cut" in line and self.cuts > 0:
                        self.cuts -= 1
                        cut[0] = True
                upstream.sendall(data)
            _close(upstream)

        threading.Thread(target=up, daemon=True).start()
        sent = 0  # reply bytes since the GET to cut was forwarded
        while data := _recv(upstream):
            if cut[0] and sent + len(data) > self.cut_after:
                client.sendall(data[: self.cut_after - sent])
                break
            client.sendall(data)
            sent += len(data) if cut[0] else 0
        _close(client)  # shutdown first: a recv blocked in the other thread would keep it open
        _close(upstream)


def _recv(s: socket.socket) -> bytes:
    try:
        return s.recv(65536)
    except OSError:
        return b""


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other side
        s.shutdown(socket.SHUT_RDWR)
    s.close()
