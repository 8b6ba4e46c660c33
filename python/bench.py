#!/usr/bin/env python3
"""1 MB push-pull goodput from a Python worker against the Rust ``bench`` worker (issue 17).

Two commands:

``python python/bench.py worker [--len B] [--keys-per-server K] [--seconds S]``
    A Python worker doing what ``pslite-worker bench --mode push-pull`` does (BytePS
    ``test_benchmark``): one key per request, every key of every server in flight at once,
    round after round; worker rank 0 first pushes a known pattern for every key and later
    pushes carry zeros, so each pulled value is checked byte for byte against the pattern.
    The zeros are pushed from one array without a copy (``copy=False``), as the Rust bench
    pushes one shared ``SArray``; ``--copy`` pushes them with the default copy instead.
    Goodput counts ``len`` bytes per completed push-pull × 8 / elapsed seconds, as the Rust
    bench counts it. Run it under ``pslite-launch local --worker-cmd``; it prints one JSON line.

``python python/bench.py compare [--runs N] [--seconds S] [--launch PATH]``
    Runs the Rust bench worker, the Python worker, and the Python worker with ``--copy`` N
    times each, interleaved, each in a fresh 1-server 1-worker cluster on loopback started by
    ``pslite-launch local`` (``target/release/pslite-launch`` by default), and prints every
    run, the medians and the ratios of median goodput to the Rust worker's (target for the
    Python worker: ≥ 0.90).
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pattern(key_index, n):
    """The bytes of key ``key_index``'s value as rank 0 pushes it (the Rust bench's pattern)."""
    import numpy as np

    i = np.arange(n, dtype=np.uint64)
    return ((i * 7) ^ np.uint64(key_index * 131)).astype(np.uint8)


def words(a):
    """``a`` (uint8) viewed as uint64 words when its length is a multiple of 8."""
    import numpy as np

    return a.view(np.uint64) if a.size % 8 == 0 else a


def worker(args):
    """One Python bench worker; prints its report as one JSON line."""
    import numpy as np
    import pslite

    with pslite.start() as po:
        kv = pslite.KVWorker(po, dtype=np.uint8)
        span = 2**64 // po.num_servers  # each server's key range begins at rank × span
        keys = [
            np.array([s * span + j], dtype=np.uint64)
            for s in range(po.num_servers)
            for j in range(args.keys_per_server)
        ]
        want = [pattern(i, args.len) for i in range(len(keys))]
        zeros = np.zeros(args.len, dtype=np.uint8)
        if po.rank == 0:
            for k, p in zip(keys, want):
                kv.wait(kv.push(k, p))
        po.barrier()
        latencies, rounds = [], 0
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            sent = [(kv.push_pull(k, zeros, copy=args.copy), time.perf_counter()) for k in keys]
            for i, (ts, t0) in enumerate(sent):
                _, vals, _ = kv.take_pulled(ts)
                latencies.append(time.perf_counter() - t0)
                # Compared as 8-byte words when the length allows (half the time of bytes).
                if not np.array_equal(words(vals), words(want[i])):
                    sys.exit(f"bench.py: key {int(keys[i][0])} came back with wrong bytes")
            rounds += 1
        elapsed = time.perf_counter() - start
        latencies.sort()
        report = {
            "worker": po.rank,
            "len": args.len,
            "keys": len(keys),
            "rounds": rounds,
            "requests": len(latencies),
            "seconds": elapsed,
            "goodput_gbps": len(latencies) * args.len * 8 / elapsed / 1e9,
            "p50_ms": 1e3 * latencies[len(latencies) // 2],
            "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "verified": True,
        }
        print(json.dumps(report), flush=True)


def run_cluster(launch, worker_part, seconds):
    """Runs one 1-server 1-worker cluster; returns the worker's JSON report."""
    cmd = [launch, "local", "--servers", "1", "--workers", "1", "--no-metrics"] + worker_part
    env = dict(os.environ, PS_TIMEOUT=str(max(60, 6 * seconds)))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120 + 4 * seconds)
    for line in out.stdout.splitlines():
        body = line.split("] ", 1)[-1]
        if body.startswith("{"):
            return json.loads(body)
    sys.exit(f"bench.py: no report from {shlex.join(cmd)} (exit {out.returncode}):\n"
             f"{out.stdout[-2000:]}{out.stderr[-2000:]}")


def compare(args):
    """Interleaved runs of the Rust and the Python bench worker; prints medians and the ratio."""
    launch = args.launch or str(ROOT / "target" / "release" / "pslite-launch")
    if not os.access(launch, os.X_OK):
        sys.exit(f"bench.py: {launch} not found: build it with `cargo build --release --bins` "
                 "or pass --launch")
    common = ["--len", str(args.len), "--keys-per-server", str(args.keys_per_server)]
    rust = ["--", "bench", "--mode", "push-pull", "--seconds", str(args.seconds), "--json"] + common
    py = ["--worker-cmd", shlex.join([sys.executable, str(Path(__file__).resolve()), "worker",
                                      "--seconds", str(args.seconds)] + common)]
    py_copy = ["--worker-cmd", py[1] + " --copy"]
    runs = {"rust": [], "python": [], "py-copy": []}
    for r in range(args.runs):
        for name, part in (("rust", rust), ("python", py), ("py-copy", py_copy)):
            rep = run_cluster(launch, part, args.seconds)
            runs[name].append(rep)
            print(f"run {r + 1}/{args.runs} {name:7}: goodput {rep['goodput_gbps']:6.2f} Gbit/s, "
                  f"p50 {rep['p50_ms']:7.2f} ms, p99 {rep['p99_ms']:7.2f} ms", flush=True)
    med = {n: statistics.median(x["goodput_gbps"] for x in v) for n, v in runs.items()}
    p50 = {n: statistics.median(x["p50_ms"] for x in v) for n, v in runs.items()}
    print(f"median of {args.runs} runs, {args.len}-byte push-pull, 1 server, 1 worker, "
          f"{args.keys_per_server} keys in flight, {args.seconds} s each:")
    what = {"rust": "Rust bench worker", "python": "Python worker, copy=False",
            "py-copy": "Python worker, copying push"}
    for n in runs:
        print(f"  {what[n]:27}: goodput {med[n]:6.2f} Gbit/s, p50 {p50[n]:7.2f} ms, "
              f"{med[n] / med['rust']:.3f} of the Rust worker's")
    print(f"  python / rust goodput: {med['python'] / med['rust']:.3f} (target ≥ 0.90)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("worker", "compare"):
        s = sub.add_parser(name)
        s.add_argument("--len", type=int, default=1_024_000, help="bytes per value")
        s.add_argument("--keys-per-server", type=int, default=40)
        s.add_argument("--seconds", type=float, default=5.0)
    sub.choices["worker"].add_argument("--copy", action="store_true",
                                       help="push with the default copy, not copy=False")
    c = sub.choices["compare"]
    c.add_argument("--runs", type=int, default=5)
    c.add_argument("--launch", help="pslite-launch (default: target/release/pslite-launch)")
    args = p.parse_args()
    worker(args) if args.cmd == "worker" else compare(args)


if __name__ == "__main__":
    main()
