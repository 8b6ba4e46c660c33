"""Clusters for the tests: pslite's Rust scheduler and servers as processes on loopback, the
test process (or its threads) as the Python workers.

The binaries come from ``PSLITE_BIN_DIR``, else the repository's ``target/release`` (built by
``cargo build --release --bins``, as ``.ci/run`` does); a test fails, naming the directory,
when they are missing.
"""

import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("PSLITE_BIN_DIR", ROOT / "target" / "release"))


def binary(name):
    path = BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run `cargo build --release --bins` "
                    "or set PSLITE_BIN_DIR")
    return str(path)


def in_threads(work, n=2, limit=60):
    """Runs ``work()`` in ``n`` threads at once (a cluster's workers); fails when one still runs
    after ``limit`` seconds, or with what the threads raised."""
    errors = []

    def run():
        try:
            work()
        except BaseException as e:  # reported by the calling thread
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit)
    assert not any(t.is_alive() for t in threads), f"a worker still runs after {limit} s"
    assert not errors, errors


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A scheduler and ``servers`` Rust servers waiting for ``workers`` workers.

    ``settings`` are the keywords every Python worker passes to ``pslite.start``; ``env`` the
    variables of every node. ``server_cmd`` replaces the Rust server with another command
    (a Python server).
    """

    def __init__(self, servers=1, workers=1, timeout=20, server_cmd=None, env=None):
        self.port = free_port()
        self.settings = dict(root_uri="127.0.0.1", root_port=self.port, num_servers=servers,
                             num_workers=workers, timeout=timeout)
        self.env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1",
                        DMLC_PS_ROOT_PORT=str(self.port), DMLC_NUM_SERVER=str(servers),
                        DMLC_NUM_WORKER=str(workers), PS_TIMEOUT=str(timeout),
                        PYTHONUNBUFFERED="1", **(env or {}))
        self.env.pop("PS_METRICS_PORT", None)
        self.procs = [self._spawn([binary("pslite-scheduler")], "scheduler")]
        self.servers = [
            self._spawn(server_cmd or [binary("pslite-server")], "server", rank)
            for rank in range(servers)
        ]
        self.procs += self.servers

    def _spawn(self, cmd, role, rank=None):
        env = dict(self.env, DMLC_ROLE=role)
        if rank is not None:
            env["PSLITE_RANK"] = str(rank)
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        # Read as it comes, so that a node writing much never blocks on a full pipe.
        p.lines = []
        p.reader = threading.Thread(target=lambda: p.lines.extend(p.stdout), daemon=True)
        p.reader.start()
        return p

    def start(self, **more):
        """This process's worker node (a ``pslite.Postoffice``)."""
        import pslite

        return pslite.start("worker", **{**self.settings, **more})

    def wait(self, timeout=30):
        """Waits for every node to exit; returns their outputs. Fails on a non-zero exit."""
        outs = []
        for p in self.procs:
            p.wait(timeout=timeout)
            p.reader.join(timeout)
            out = "".join(p.lines)
            outs.append(out)
            if p.returncode != 0:
                pytest.fail(f"{p.args} exited with {p.returncode}:\n{out}")
        return outs

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()


@pytest.fixture
def cluster():
    """``cluster(servers=…, workers=…, …)`` starts a Cluster; every one is stopped at the end."""
    made = []

    def make(**kw):
        made.append(Cluster(**kw))
        return made[-1]

    yield make
    for c in made:
        c.kill()
