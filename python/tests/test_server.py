"""run_server from Python: the sum handler serving Rust-built workers' requests, and a Python
callable as handler (its answers, and its exceptions reaching the worker as pslite.Error)."""

import sys
import textwrap

import numpy as np
import pytest

import pslite

# A Python server: a dict store; pushes add, pulls answer. Key 13 makes the handler raise,
# key 14 return None, and a pull with cmd 5 answers (vals, lens) of varying lengths.
PY_SERVER = textwrap.dedent("""
    import numpy as np, pslite
    store = {}
    def handler(meta, keys, vals, lens):
        assert keys.dtype == np.uint64 and vals.dtype == np.float64 and lens.dtype == np.uint32
        if 13 in keys:
            raise KeyError("key 13 is cursed")
        if 14 in keys:
            return None
        if meta.push:
            width = len(vals) // len(keys)
            for i, k in enumerate(keys):
                store[int(k)] = store.get(int(k), 0) + vals[i * width:(i + 1) * width]
        if meta.pull:
            return np.concatenate([store[int(k)] for k in keys])
    with pslite.start() as po:
        pslite.run_server(po, handler, dtype=np.float64)
        print("served", sorted(store), flush=True)
""")

SUM_SERVER = "import pslite\nwith pslite.start() as po:\n    pslite.run_server(po)\n"


def test_a_python_callable_handler(cluster):
    c = cluster(servers=2, server_cmd=[sys.executable, "-c", PY_SERVER])
    with c.start() as po:
        kv = pslite.KVWorker(po, dtype=np.float64)
        keys = np.array([1, 2**63 + 1], dtype=np.uint64)  # one key per server
        for _ in range(3):
            kv.wait(kv.push(keys, np.array([1.0, 2.0, 10.0, 20.0])))
        out = np.zeros(4)
        kv.pull_into(keys, out)
        np.testing.assert_array_equal(out, [3.0, 6.0, 30.0, 60.0])
        with pytest.raises(pslite.Error) as e:
            kv.wait(kv.push([13], [1.0]))
        assert "server rank 0 (id 8) answered with an error: the Python handler raised " \
               "KeyError: 'key 13 is cursed'" in str(e.value), str(e.value)
        with pytest.raises(pslite.Error, match="the Python handler raised ValueError: it "
                           "returned None for a pull of 1 keys: return their values"):
            kv.pull_into([14], np.zeros(1))
        # A push-pull: the handler adds, then answers the sums.
        _, sums, _ = kv.take_pulled(kv.push_pull(keys, np.array([1.0, 1.0, 1.0, 1.0])))
        np.testing.assert_array_equal(sums, [4.0, 7.0, 31.0, 61.0])
        # The server goes on serving.
        kv.pull_into(keys, out)
        np.testing.assert_array_equal(out, [4.0, 7.0, 31.0, 61.0])
    outs = c.wait()
    assert "served [1]" in outs[1] and "KeyError: 'key 13 is cursed'" in outs[1], outs[1]
    assert f"served [{2**63 + 1}]" in outs[2], outs[2]


def test_the_sum_handler_from_python(cluster):
    """Python servers with the default handler: every dtype's pushes are summed."""
    c = cluster(servers=2, server_cmd=[sys.executable, "-c", SUM_SERVER])
    with c.start() as po:
        for i, dtype in enumerate(pslite.DTYPES):
            kv = pslite.KVWorker(po, customer_id=i, dtype=dtype)
            keys = np.array([7, 2**64 - 7], dtype=np.uint64)
            vals = np.array([1, 2, 3], dtype=dtype)
            kv.wait(kv.push(keys, vals, [1, 2]))
            kv.wait(kv.push(keys, vals, [1, 2]))
            out = np.zeros(3, dtype)
            kv.pull_into(keys, out)
            np.testing.assert_array_equal(out, 2 * vals)
    c.wait()


def test_run_server_refuses_a_worker_and_a_bad_handler(cluster):
    c = cluster()
    with c.start() as po:
        with pytest.raises(pslite.InvalidArgumentError,
                           match="run_server needs a server's postoffice; this one is the worker's"):
            pslite.run_server(po)
    c.wait()


VARYING_SERVER = textwrap.dedent("""
    import numpy as np, pslite
    def handler(meta, keys, vals, lens):
        # Key k holds k values k, k, ...: answered with their lens.
        if meta.pull:
            lens = [int(k) for k in keys]
            return np.concatenate([np.full(n, n, np.int32) for n in lens]), lens
    with pslite.start() as po:
        pslite.run_server(po, handler, dtype="int32")
""")


def test_a_handler_answering_lens(cluster):
    """A handler returning (vals, lens): the worker gets every key's own length."""
    c = cluster(server_cmd=[sys.executable, "-c", VARYING_SERVER])
    with c.start() as po:
        kv = pslite.KVWorker(po, dtype=np.int32)
        keys, vals, lens = kv.take_pulled(kv.pull([1, 2, 3]))
        np.testing.assert_array_equal(lens, [1, 2, 3])
        np.testing.assert_array_equal(vals, [1, 2, 2, 3, 3, 3])
    c.wait()


def test_a_lost_server_raises_peer_lost_error(cluster):
    """A server killed (SIGKILL): once the scheduler declares it lost (PS_HEARTBEAT_TIMEOUT),
    the worker's wait raises pslite.PeerLostError naming it."""
    import os
    import signal

    c = cluster(servers=2, env={"PS_HEARTBEAT_TIMEOUT": "2", "PS_HEARTBEAT_INTERVAL": "0.5"})
    po = c.start(PS_HEARTBEAT_TIMEOUT=2, PS_HEARTBEAT_INTERVAL=0.5)
    kv = pslite.KVWorker(po)
    kv.wait(kv.push([1, 2**63 + 1], [1.0, 2.0]))
    os.kill(c.servers[1].pid, signal.SIGKILL)
    with pytest.raises(pslite.PeerLostError) as e:
        for _ in range(100):  # until the loss is known, pushes to server 0 alone succeed
            kv.wait(kv.push([1, 2**63 + 1], [1.0, 2.0]))
    assert "peer lost" in str(e.value) and "server rank 1" in str(e.value), str(e.value)
    with pytest.raises(pslite.PeerLostError):
        po.finalize()
