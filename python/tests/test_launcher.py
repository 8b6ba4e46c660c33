"""pslite-launch local --worker-cmd: Python workers with pslite's scheduler and servers, and
the data-parallel MLP example reaching its accuracy on a8a."""

import re
import subprocess
import sys

from conftest import ROOT, binary


def launch(*args, timeout=240):
    return subprocess.run([binary("pslite-launch"), "local", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_python_workers_get_their_variables():
    script = ("import os, pslite; po = pslite.start(); "
              "print('rank', po.rank, os.environ['PSLITE_RANK'], os.environ['DMLC_ROLE'], "
              "po.num_workers, po.num_servers); po.finalize()")
    r = launch("--servers", "2", "--workers", "3", "--no-metrics", "--worker-cmd",
               f"{sys.executable} -c \"{script}\"")
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert f"[worker {rank}] rank {rank} {rank} worker 3 2" in r.stdout, r.stdout


def test_a_failing_python_worker_fails_the_run():
    r = launch("--worker-cmd", f"{sys.executable} -c 'import sys; sys.exit(3)'")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "worker 0 exited with exit status: 3" in r.stderr, r.stderr


def test_a_failure_stops_a_compound_worker_command():
    """Worker 1's command is compound (python is the shell's grandchild) and would wait for
    ten minutes; worker 0 fails: the launcher stops the whole command and exits at once."""
    import time

    script = ("import sys, time, pslite; po = pslite.start(); "
              "sys.exit(3) if po.rank == 0 else time.sleep(600)")
    t0 = time.monotonic()
    r = launch("--workers", "2", "--no-metrics", "--worker-cmd",
               f"cd /tmp && {sys.executable} -c '{script}' && true", timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert time.monotonic() - t0 < 30, r.stderr
    left = subprocess.run(["pgrep", "-f", "time.sleep\\(600\\)"], capture_output=True, text=True)
    assert left.stdout == "", f"left running: {left.stdout}"


def test_the_mlp_example_reaches_its_accuracy():
    """examples/python/mlp_a8a.py with 2 servers and 2 workers: test accuracy ≥ 0.845."""
    r = launch("--servers", "2", "--workers", "2", "--worker-cmd",
               f"{sys.executable} examples/python/mlp_a8a.py --require 0.845")
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    epochs = re.findall(r"\[worker 0\] epoch (\d+): test accuracy (0\.\d+)", r.stdout)
    assert len(epochs) >= 2, r.stdout
    final = re.search(r"\[worker 0\] final test accuracy (0\.\d+)", r.stdout)
    assert final and float(final.group(1)) >= 0.845, r.stdout
