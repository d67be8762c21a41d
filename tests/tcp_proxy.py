"""A tiny TCP proxy on 127.0.0.1 for tests of a network that goes silent:
`freeze()` stops forwarding in both directions without closing anything (a
partition, a frozen host: the client's kernel still sees an open connection),
`thaw()` resumes, `cut()` closes every connection it carries."""
from __future__ import annotations

import selectors
import socket
import threading
import time


class TcpProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frozen = threading.Event()
        self.stopped = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def url(self, db: int = 0, query: str = "") -> str:
        return f"redis://127.0.0.1:{self.port}/{db}" + (f"?{query}" if query else "")

    def freeze(self) -> None:
        self.frozen.set()

    def thaw(self) -> None:
        self.frozen.clear()

    def cut(self) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            # a frozen network: connections are accepted (the SYN is answered
            # by the kernel anyway) but nothing reaches the server
            while self.frozen.is_set() and not self.stopped.is_set():
                time.sleep(0.02)
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True, name="proxy-pump").start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while not self.stopped.is_set():
                if self.frozen.is_set():  # leave the bytes where they are
                    time.sleep(0.02)
                    continue
                for key, _ in sel.select(timeout=0.05):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
