"""Python workers against pslite's Rust servers: exact sums, every dtype, pull_into, malformed
calls raising the Rust message, deadlines raising TimeoutError, the GIL released."""

import builtins
import os
import signal
import threading

import numpy as np
import pytest

import pslite

# Keys spread over both servers of a 2-server cluster (each server owns half of [0, 2^64)).
KEYS = np.array([3, 2**40, 2**63 + 5, 2**64 - 1], dtype=np.uint64)
LENS = np.array([1, 3, 2, 4], dtype=np.uint32)


def test_two_python_workers_get_exact_sums(cluster):
    """Two workers (threads of this process, each its own node) push 5 times each; both pull
    exactly 10 × their values. The workers' barrier passes only if each thread releases the
    GIL while it waits."""
    c = cluster(servers=2, workers=2)
    vals = np.arange(1, 11, dtype=np.float32)  # 10 values: lens 1+3+2+4
    got, errors = {}, []

    def work():
        try:
            with c.start() as po:
                kv = pslite.KVWorker(po)
                for _ in range(5):
                    kv.wait(kv.push(KEYS, vals, LENS))
                po.barrier()
                out = np.zeros(10, np.float32)
                kv.pull_into(KEYS, out)
                keys, pulled, lens = kv.take_pulled(kv.pull(KEYS))
                got[po.rank] = (out, keys, pulled, lens)
        except Exception as e:  # reported below, with the thread's error text
            errors.append(e)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(got) == [0, 1]
    for out, keys, pulled, lens in got.values():
        np.testing.assert_array_equal(out, 10 * vals)
        np.testing.assert_array_equal(keys, KEYS)
        np.testing.assert_array_equal(pulled, 10 * vals)
        np.testing.assert_array_equal(lens, LENS)
        assert pulled.dtype == np.float32 and keys.dtype == np.uint64 and lens.dtype == np.uint32
    c.wait()


@pytest.mark.parametrize("dtype", pslite.DTYPES)
def test_every_dtype_round_trips(cluster, dtype):
    """push, push_pull and pull of each dtype: exact sums (integers wrap as the servers'
    wrapping add does), through take_pulled and push_pull_into."""
    c = cluster(servers=2)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    first = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=dtype)
    if info is not None:
        first[-1] = info.max  # wraps on the second push
    with c.start() as po:
        kv = pslite.KVWorker(po, dtype=dtype)
        assert kv.dtype == np.dtype(dtype)
        kv.wait(kv.push(KEYS, first, LENS))
        _, after, _ = kv.take_pulled(kv.push_pull(KEYS, first, LENS.tolist()))
        want = np.add(first, first)  # NumPy's integer arrays wrap as the servers do
        if info is not None:
            assert want[-1] == info.max - 1 if info.min == 0 else want[-1] == -2
        np.testing.assert_array_equal(after, want)
        assert after.dtype == np.dtype(dtype)
        out = np.empty(10, dtype)
        kv.push_pull_into(KEYS, np.zeros(10, dtype), out, LENS)
        np.testing.assert_array_equal(out, want)
    c.wait()


def test_pull_into_writes_into_the_callers_array(cluster):
    """pull_into fills the given memory itself: a slice of a larger array is written in place
    and the rest is left alone; a one-key pull too."""
    c = cluster(servers=2)
    with c.start() as po:
        kv = pslite.KVWorker(po, dtype=np.float64)
        kv.wait(kv.push(KEYS, np.arange(10, dtype=np.float64) + 0.5, LENS))
        big = np.full(14, -1.0)
        kv.pull_into(KEYS, big[2:12])
        np.testing.assert_array_equal(big[2:12], np.arange(10) + 0.5)
        np.testing.assert_array_equal(big[[0, 1, 12, 13]], -1.0)
        one = np.zeros(3)
        kv.pull_into(KEYS[1:2], one)
        np.testing.assert_array_equal(one, [1.5, 2.5, 3.5])
    c.wait()


def test_malformed_calls_raise_with_the_rust_message(cluster):
    c = cluster(servers=2)
    with c.start() as po:
        kv = pslite.KVWorker(po)
        vals = np.ones(4, np.float32)
        cases = [
            (lambda: kv.push([5, 3], vals),
             "invalid argument: keys must be sorted and unique: keys[1] = 3 follows keys[0] = 5"),
            (lambda: kv.push([3, 3], vals), "keys[1] = 3 follows keys[0] = 3"),
            (lambda: kv.push([1, 2], np.ones(4)),
             "vals: an array of float64, but this call carries float32"),
            (lambda: kv.push([1, 2], np.ones(8, np.float32)[::2]),
             "vals: the array is not C-contiguous"),
            (lambda: kv.push([1, 2], vals, [1, 2]),
             "invalid argument: lens add up to 3 values but 4 values were given"),
            (lambda: kv.push(np.array([1, -2]), vals), "keys[1] = -2 is negative: keys are uint64"),
            (lambda: kv.push([1, -2], vals), "Python integer -2 out of bounds for uint64"),
            (lambda: kv.pull_into([1, 2], np.ones((2, 4), np.float32)[:, 1]),
             "out: the array is not C-contiguous"),
            (lambda: kv.push([1, 2], vals.astype(np.int32)),
             "vals: an array of int32, but this call carries float32"),
            (lambda: kv.wait(12345), "invalid argument"),
            (lambda: pslite.KVWorker(po, dtype=np.float16), "dtype=float16 is not supported"),
        ]
        for call, text in cases:
            with pytest.raises(pslite.InvalidArgumentError) as e:
                call()
            assert text in str(e.value), (text, str(e.value))
            assert isinstance(e.value, ValueError)
        kv.wait(kv.push([1, 2], vals))
        read_only = np.zeros(4, np.float32)
        read_only.flags.writeable = False
        with pytest.raises(pslite.InvalidArgumentError, match="out: the array is read-only"):
            kv.pull_into([1, 2], read_only)
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"pulled 4 values for 2 keys but the buffer holds 3"):
            kv.pull_into([1, 2], np.zeros(3, np.float32))
        # The worker goes on after every refusal.
        out = np.zeros(4, np.float32)
        kv.pull_into([1, 2], out)
        np.testing.assert_array_equal(out, vals)
    c.wait()


def stop_process(pid):
    """SIGSTOP, and waits until every thread of ``pid`` is stopped (the signal takes effect
    asynchronously: a thread running elsewhere stops a moment later)."""
    import glob
    import time

    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
            try:
                with open(stat) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass
        if states and all(s == "T" for s in states):
            return
        time.sleep(0.01)
    pytest.fail(f"process {pid} did not stop within 10 s")


def test_a_deadline_raises_timeout_error(cluster):
    """A server that stops answering (SIGSTOP): wait raises pslite.TimeoutError, a
    builtins.TimeoutError too, naming the server; the worker's other server still answers.
    Another Python thread runs all the while (the GIL is released)."""
    c = cluster(servers=2)
    with c.start(timeout=3) as po:
        kv = pslite.KVWorker(po)
        stop_process(c.servers[1].pid)
        ticks, stop = [0], threading.Event()

        def count():
            while not stop.is_set():
                ticks[0] += 1

        counter = threading.Thread(target=count, daemon=True)
        try:
            ts = kv.push(KEYS, np.ones(10, np.float32), LENS)
            counter.start()
            with pytest.raises(pslite.TimeoutError) as e:
                kv.wait(ts)
            stop.set()
            counter.join()
            assert ticks[0] > 100_000, f"the other thread ran only {ticks[0]} loops in 3 s"
            assert isinstance(e.value, builtins.TimeoutError)
            assert isinstance(e.value, pslite.Error)
            assert "timed out" in str(e.value) and "server rank 1" in str(e.value), str(e.value)
            kv.wait(kv.push(KEYS[:1], np.ones(1, np.float32)))  # server rank 0 answers
        finally:
            os.kill(c.servers[1].pid, signal.SIGCONT)
    c.wait()


def test_start_errors_name_the_setting(monkeypatch):
    monkeypatch.delenv("DMLC_ROLE", raising=False)
    with pytest.raises(pslite.Error, match="DMLC_ROLE is not set and no role was given"):
        pslite.start()
    with pytest.raises(pslite.InvalidArgumentError, match=r"start\(num_server=…\): unknown"):
        pslite.start("worker", num_server=2)
    with pytest.raises(pslite.Error, match=r'DMLC_NUM_SERVER \(or num_servers=\) is "two"'):
        pslite.start("worker", root_uri="127.0.0.1", root_port=9, num_servers="two",
                     num_workers=1)
    with pytest.raises(pslite.InvalidArgumentError, match='role "boss"'):
        pslite.start("boss")


def test_copy_false_shares_the_array_until_the_van_is_done(cluster):
    """push(copy=False) sends the caller's memory itself: the sums are right, and the buffer
    is exported while the van holds it and released afterwards (a bytearray can be resized
    again only once no export is left)."""
    import time

    c = cluster(servers=2)
    with c.start() as po:
        kv = pslite.KVWorker(po, dtype=np.uint8)
        shared = bytearray(range(8))
        for _ in range(3):
            ts = kv.push([1, 2**63], shared, copy=False)
            with pytest.raises(BufferError):  # lent, not copied
                shared.extend(b"!")
            kv.wait(ts)
        ts = kv.push_pull([1, 2**63], np.ones(8, np.uint8), copy=False)
        _, vals, _ = kv.take_pulled(ts)
        np.testing.assert_array_equal(vals, 3 * np.arange(8, dtype=np.uint8) + 1)
        for _ in range(50):  # the van drops its frames once they are on the wire
            kv.wait(kv.push([1], np.zeros(4, np.uint8)))  # a call releases what it let go
            try:
                shared.extend(b"!")
                break
            except BufferError:
                time.sleep(0.01)
        assert len(shared) == 9, "the pushed bytearray is still exported"
    c.wait()


def test_byte_order_is_checked_and_ctypes_arrays_work(cluster):
    """Arrays in the other byte order are refused (not read byte-swapped); buffers that spell
    out this machine's order (ctypes: '<f') are read and written in place."""
    import ctypes

    c = cluster(servers=2)
    with c.start() as po:
        kv = pslite.KVWorker(po)
        swapped = np.arange(4, dtype=">f4")
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"vals: an array of float32 in the other byte order"):
            kv.push([1, 2], swapped)
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"keys: an array of uint64 in the other byte order"):
            kv.push(np.array([1, 2], dtype=">u8"), np.ones(4, np.float32))
        vals = (ctypes.c_float * 4)(1.5, 2.5, 3.5, 4.5)
        assert memoryview(vals).format == "<f"
        kv.wait(kv.push([1, 2], vals))
        out = (ctypes.c_float * 4)()
        kv.pull_into([1, 2], out)
        assert list(out) == [1.5, 2.5, 3.5, 4.5]
        with pytest.raises(pslite.InvalidArgumentError, match="out: an array of float32 in"):
            kv.pull_into([1, 2], np.zeros(4, ">f4"))
    c.wait()


def test_out_may_not_share_memory_with_an_input(cluster):
    c = cluster()
    with c.start() as po:
        kv = pslite.KVWorker(po, dtype=np.uint64)
        keys = np.array([1, 2], dtype=np.uint64)
        kv.wait(kv.push(keys, keys))
        with pytest.raises(pslite.InvalidArgumentError, match="keys and out share memory"):
            kv.pull_into(keys, keys)
        both = np.array([1, 2, 0, 0], dtype=np.uint64)
        with pytest.raises(pslite.InvalidArgumentError, match="vals and out share memory"):
            kv.push_pull_into(keys, both[1:3], both[2:])
        np.testing.assert_array_equal(both, [1, 2, 0, 0])  # nothing was sent or written
        out = np.zeros(2, np.uint64)
        kv.push_pull_into(keys, keys, out)
        np.testing.assert_array_equal(out, [2, 4])
    c.wait()


def test_lists_are_converted_strictly(cluster):
    """Lists, tuples and ranges of numbers are converted; a None, a float where whole numbers
    are expected, or another object is refused instead of becoming a NaN or a truncated key."""
    c = cluster()
    with c.start() as po:
        kv = pslite.KVWorker(po)
        kv8 = pslite.KVWorker(po, customer_id=1, dtype=np.uint8)
        cases = [
            (lambda: kv.push([1], [None]), "vals: a list of object cannot carry float32"),
            (lambda: kv.push([1], None), "vals: expected an array of float32"),
            (lambda: kv.push([1.5], [1.0]), "keys: a list of float cannot carry uint64"),
            (lambda: kv8.push([1], [1.5]), "vals: a list of float cannot carry uint8"),
            (lambda: kv8.push([1], [300]), "vals: OverflowError: Python integer 300 out of bounds for uint8"),
            (lambda: kv.push({1: 2}, [1.0]), "keys: expected an array of uint64"),
        ]
        for call, text in cases:
            with pytest.raises(pslite.InvalidArgumentError) as e:
                call()
            assert text in str(e.value), (text, str(e.value))
        kv.wait(kv.push(range(1, 3), (1, 2.5)))
        kv8.wait(kv8.push((3,), [7, 8]))
        out = np.zeros(2, np.float32)
        kv.pull_into([1, 2], out)
        np.testing.assert_array_equal(out, [1, 2.5])
    c.wait()


def test_ctrl_c_interrupts_a_barrier(cluster):
    """SIGINT (Ctrl-C) during a barrier raises KeyboardInterrupt at once; the node stays and
    finalizes once the barrier completes."""
    import time

    c = cluster(workers=2)
    started, release = threading.Event(), threading.Event()
    other_error = []

    def other():
        try:
            with c.start() as po:
                started.set()
                release.wait(30)
                po.barrier()
        except Exception as e:
            other_error.append(e)

    t = threading.Thread(target=other, daemon=True)
    t.start()
    # Python's own Ctrl-C handler, as at a terminal: a shell that started this process in the
    # background (`cmd &` without job control) hands it SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with c.start() as po:
            assert started.wait(30)
            timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                po.barrier()
            assert time.monotonic() - t0 < 5
            release.set()  # the other worker arrives: the interrupted barrier completes alone
    finally:
        signal.signal(signal.SIGINT, previous)
    t.join(30)
    assert not other_error, other_error
    c.wait()


def test_finalize_is_idempotent_and_exit_keeps_the_exception(cluster):
    c = cluster()
    with pytest.raises(RuntimeError, match="training failed"):
        with c.start() as po:
            kv = pslite.KVWorker(po)
            kv.wait(kv.push([1], [1.0]))
            raise RuntimeError("training failed")
    po.finalize()  # already finalized on exit: returns at once
    c.wait()


def test_a_server_drained_and_added_back_keeps_the_sums_exact(cluster):
    """Three servers; the worker drains server 2 between pushes (its keys move to server 1),
    pushes, adds it back, pushes: every key's sum is exact, and the refusals raise with the
    scheduler's text."""
    c = cluster(servers=3, workers=1)
    keys = np.array([i * (2**64 // 12) + 1 for i in range(12)], dtype=np.uint64)
    vals = np.arange(1, 13, dtype=np.float32)
    with c.start() as po:
        kv = pslite.KVWorker(po)
        kv.wait(kv.push(keys, vals))
        epoch, moved, seconds = po.resize(2)
        assert epoch == 1 and moved > 0 and seconds >= 0
        kv.wait(kv.push(keys, vals))
        with pytest.raises(pslite.InvalidArgumentError, match="owns no keys"):
            po.resize(2)
        assert po.resize(2, add=True)[0] == 2
        kv.wait(kv.push(keys, vals))
        out = np.zeros(12, np.float32)
        kv.pull_into(keys, out)
        np.testing.assert_array_equal(out, 3 * vals)
    c.wait()
