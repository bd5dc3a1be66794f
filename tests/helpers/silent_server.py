"""A TCP server that accepts every connection and never sends a byte: a stuck port-forward, a GCS or an API server
that hangs. Every wait of the project must end against it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def silent_server(host: str = "127.0.0.1") -> Iterator[int]:
    """Listen on ``host`` (a port the kernel picks) until the block ends; yields the port."""
    server = socket.socket()
    server.bind((host, 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        server.close()
