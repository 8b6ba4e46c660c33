"""Embedding tables from Python: pslite.Table's spec lines (pslite's own parser, its errors),
and run_server(tables=…) serving initial rows and AdaGrad steps to a Python worker, beside
the sum handler."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pslite
from conftest import binary

# Keys spread over both servers of a 2-server cluster (each server owns half of [0, 2^64)).
KEYS = np.array([3, 2**40, 2**63 + 5, 2**64 - 1], dtype=np.uint64)

ADAGRAD_SERVER = textwrap.dedent("""
    import pslite
    table = pslite.Table(app=0, dim=4, init=pslite.Normal(0, 0.01),
                         optimizer=pslite.Adagrad(lr=0.05))
    with pslite.start() as po:
        pslite.run_server(po, tables=[table])
""")


def test_a_table_serves_initial_rows_then_adagrad_steps(cluster):
    """Keys never pushed get their initial rows (nonzero, the same on every pull); a pushed
    gradient moves them by exactly AdaGrad's formula, computed here in float32 in the servers'
    order of operations; the accumulators carry over to the next push. The sum handler still
    serves app 0's other dtypes."""
    c = cluster(servers=2, server_cmd=[sys.executable, "-c", ADAGRAD_SERVER])
    lr, eps = np.float32(0.05), np.float32(1e-10)
    with c.start() as po:
        kv = pslite.KVWorker(po)
        first = np.zeros(16, np.float32)
        kv.pull_into(KEYS, first)
        assert np.count_nonzero(first) == 16, first
        assert np.abs(first).max() < 0.1, first  # normal(0, 0.01)
        assert len(np.unique(first)) == 16, first  # every key its own row
        again = np.zeros(16, np.float32)
        kv.pull_into(KEYS, again)
        np.testing.assert_array_equal(again, first)

        g = np.linspace(-1.5, 2.0, 16, dtype=np.float32)
        kv.wait(kv.push(KEYS, g))
        after = np.zeros(16, np.float32)
        kv.pull_into(KEYS, after)
        acc = np.float32(0) + g * g  # init_acc 0
        want = first - lr * g / (np.sqrt(acc) + eps)
        assert want.dtype == np.float32
        np.testing.assert_array_equal(after, want)

        # A push-pull answers the rows after its step; acc keeps the first push's g².
        _, stepped, _ = kv.take_pulled(kv.push_pull(KEYS, g))
        acc = acc + g * g
        want = want - lr * g / (np.sqrt(acc) + eps)
        np.testing.assert_array_equal(stepped, want)

        # A push of the wrong length is refused with the table's text; nothing changes.
        with pytest.raises(pslite.Error, match="table app 0: a push of 3 values for 1 keys; "
                           "the table's rows have dim 4, so 4 values"):
            kv.wait(kv.push([3], np.ones(3, np.float32)))
        kv.pull_into(KEYS, after)
        np.testing.assert_array_equal(after, want)

        # App 0's float64 requests go to the sum handler.
        kv64 = pslite.KVWorker(po, customer_id=1, dtype=np.float64)
        vals = np.arange(1.0, 9.0)
        kv64.wait(kv64.push(KEYS, vals))
        kv64.wait(kv64.push(KEYS, vals))
        out = np.zeros(8)
        kv64.pull_into(KEYS, out)
        np.testing.assert_array_equal(out, 2 * vals)
    outs = c.wait()
    line = ("pslite: table app 0: app=0,dim=4,init=normal:0:0.01,seed=0,"
            "opt=adagrad:lr=0.05:eps=0.0000000001:init_acc=0,admit=all,evict=lru; no budget")
    for out in outs[1:]:
        assert line in out, out


BESIDE_SERVER = textwrap.dedent("""
    import pslite
    with pslite.start() as po:
        pslite.run_server(po, "sum", tables=["app=1,dim=4"])
""")


def test_a_table_beside_the_sum_handler(cluster):
    """A table on app 1 (SGD, zeros) leaves app 0's float32 sums exact."""
    c = cluster(servers=2, server_cmd=[sys.executable, "-c", BESIDE_SERVER])
    with c.start() as po:
        sums = pslite.KVWorker(po)
        table = pslite.KVWorker(po, app_id=1)
        vals = np.arange(1, 11, dtype=np.float32)
        lens = np.array([1, 3, 2, 4], dtype=np.uint32)
        g = np.linspace(-1, 1, 16, dtype=np.float32)
        for _ in range(3):
            sums.wait(sums.push(KEYS, vals, lens))
        table.wait(table.push(KEYS, g))
        out = np.zeros(10, np.float32)
        sums.pull_into(KEYS, out)
        np.testing.assert_array_equal(out, 3 * vals)
        rows = np.empty(16, np.float32)
        table.pull_into(KEYS, rows)
        np.testing.assert_array_equal(rows, np.float32(0) - np.float32(0.01) * g)
        # Keys the table never saw: zeros.
        table.pull_into(KEYS - np.uint64(1), rows)
        np.testing.assert_array_equal(rows, np.zeros(16, np.float32))
    c.wait()


def test_table_builds_the_canonical_spec_line():
    line = ("app=0,dim=16,init=normal:0:0.01,seed=0,opt=adagrad:lr=0.05:eps=0.0000000001:"
            "init_acc=0,admit=count:2,budget=512MiB,evict=lru")
    t = pslite.Table(app=0, dim=16, init=pslite.Normal(0, 0.01),
                     optimizer=pslite.Adagrad(lr=0.05), admit=pslite.AdmitCount(2),
                     budget="512MiB", evict="lru")
    assert str(t) == t.spec == line
    given = "app=0,dim=16,init=normal:0:0.01,opt=adagrad:lr=0.05,admit=count:2,budget=512MiB"
    assert pslite._pslite.table_spec(given) == line
    # The tuple form, bytes as an int: the same table.
    assert pslite.Table(app=0, dim=16, init=("normal", 0, 0.01),
                        optimizer=pslite.Adagrad(0.05), admit=pslite.AdmitCount(2),
                        budget=512 << 20) == t
    assert pslite.Table(app=0, dim=16).spec == \
        "app=0,dim=16,init=zeros,seed=0,opt=sgd:lr=0.01,admit=all,evict=lru"
    for table, want in [
        (pslite.Table(app=-2, dim=8, init=pslite.Uniform(-0.5, 0.5), seed=99,
                      optimizer=pslite.SGD(0.1, wd=0.001)),
         "app=-2,dim=8,init=uniform:-0.5:0.5,seed=99,opt=sgd:lr=0.1:wd=0.001"),
        (pslite.Table(app=1, dim=4, init=("uniform", -1, 1),
                      optimizer=pslite.Adam(lr=0.002, b1=0.8, b2=0.99, eps=1e-6),
                      admit=pslite.AdmitProbability(0.25)),
         "app=1,dim=4,init=uniform:-1:1,opt=adam:lr=0.002:b1=0.8:b2=0.99:eps=0.000001,"
         "admit=prob:0.25"),
        (pslite.Table(app=1, dim=4, optimizer=pslite.FTRL(alpha=0.1, l1=0.5, l2=2),
                      admit=pslite.AdmitCount(5, width=1024), budget=1000,
                      evict=pslite.TTL(100)),
         "app=1,dim=4,opt=ftrl:alpha=0.1:beta=1:l1=0.5:l2=2,admit=count:5:width=1024,"
         "budget=1000,evict=ttl:100"),
        (pslite.Table(app=3, dim=2, optimizer="adagrad:lr=0.5", admit="all", evict="ttl:8"),
         "app=3,dim=2,opt=adagrad:lr=0.5,evict=ttl:8"),
    ]:
        assert table.spec == pslite._pslite.table_spec(want), table


def test_bad_specs_raise_the_rust_text():
    """The text is the parser's, as pslite-server --table gives it."""
    with pytest.raises(pslite.InvalidArgumentError) as e:
        pslite.Table(app=0, dim=0)
    assert str(e.value) == \
        "invalid argument: bad table spec 'app=0,dim=0': dim: '0': allowed: 1 to 1048576"
    rmsprop = ("bad table spec 'app=0,dim=4,opt=rmsprop': opt: unknown optimizer 'rmsprop'; "
               "allowed: sgd, adagrad, adam, ftrl")
    for make in (lambda: pslite._pslite.table_spec("app=0,dim=4,opt=rmsprop"),
                 lambda: pslite.Table(app=0, dim=4, optimizer="rmsprop")):
        with pytest.raises(pslite.InvalidArgumentError) as e:
            make()
        assert str(e.value) == "invalid argument: " + rmsprop
        assert isinstance(e.value, ValueError)
    # pslite-server refuses the same line with the same text, before it joins a cluster.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DMLC_", "PS_", "PSLITE_"))}
    server = subprocess.run([binary("pslite-server"), "--table", "app=0,dim=4,opt=rmsprop"],
                            env=env, capture_output=True, text=True, timeout=30)
    assert server.returncode != 0 and rmsprop in server.stderr, server.stderr
    for table, want in [
        (lambda: pslite.Table(app=0, dim=4, optimizer=pslite.Adagrad(lr=-1)),
         "opt: adagrad:lr=-1:eps=0.0000000001:init_acc=0 is out of range"),
        (lambda: pslite.Table(app=0, dim=4, admit=pslite.AdmitCount(0)),
         "admit: count:0: allowed: 1 to 255 pushes"),
        (lambda: pslite.Table(app=0, dim=4, budget="12XB"),
         "budget: '12XB'; allowed: a whole number of bytes"),
        (lambda: pslite.Table(app=0, dim=4, evict=pslite.TTL(0)),
         "evict: ttl:0: allowed: ttl:T with T ≥ 1 pushes"),
        (lambda: pslite.Table(app=0, dim=4, seed=-1),
         "seed: '-1' is not a whole number ≥ 0"),
        (lambda: pslite.Table(app=0, dim=4, init=pslite.Normal(0, -1)),
         "init: normal:0:-1 needs a finite mean and STD ≥ 0"),
        # Arguments refused before a line is made: named with the argument.
        (lambda: pslite.Table(app=0, dim="4"), "Table(dim='4'): expected an int"),
        (lambda: pslite.Table(app=0, dim=4, optimizer=pslite.SGD(lr="x")),
         "SGD(lr='x'): expected a number"),
        (lambda: pslite.Table(app=0, dim=4, init=("gauss", 0, 1)),
         "Table(init=('gauss', 0, 1)): expected \"zeros\""),
        (lambda: pslite.Table(app=0, dim=4, budget="1MiB,dim=5"),
         "Table(budget='1MiB,dim=5'): a spec value cannot contain ','"),
        (lambda: pslite.Table(app=0, dim=4, evict=5),
         "Table(evict=5): expected \"lru\" or pslite.TTL(pushes)"),
    ]:
        with pytest.raises(pslite.InvalidArgumentError) as e:
            table()
        assert want in str(e.value), str(e.value)


REFUSING_SERVER = textwrap.dedent("""
    import numpy as np, pslite
    def handler(meta, keys, vals, lens):
        return None
    with pslite.start() as po:
        for kw in [dict(tables=["app=0,dim=4,opt=rmsprop"]),
                   dict(tables=["app=1,dim=4", pslite.Table(app=1, dim=8)]),
                   dict(tables="app=0,dim=4"),
                   dict(tables=[5]),
                   dict(handler=handler, tables=["app=0,dim=4"]),
                   dict(tables=["app=0,dim=4,budget=100"])]:
            try:
                pslite.run_server(po, **kw)
                print("served", kw, flush=True)
            except pslite.InvalidArgumentError as e:
                print("refused:", e, flush=True)
        # Nothing was served by the refused calls: the same application serves now.
        pslite.run_server(po, tables=[pslite.Table(app=0, dim=2)])
""")


def test_run_server_refuses_bad_tables_before_serving(cluster):
    c = cluster(server_cmd=[sys.executable, "-c", REFUSING_SERVER])
    with c.start() as po:
        kv = pslite.KVWorker(po)
        g = np.array([1.0, 2.0], np.float32)
        kv.wait(kv.push([7], g))
        rows = np.empty(2, np.float32)
        kv.pull_into([7], rows)
        np.testing.assert_array_equal(rows, np.float32(0) - np.float32(0.01) * g)
    out = c.wait()[1]
    assert "served" not in out, out
    for want in [
        "refused: invalid argument: bad table spec 'app=0,dim=4,opt=rmsprop': opt: unknown "
        "optimizer 'rmsprop'; allowed: sgd, adagrad, adam, ftrl",
        "refused: invalid argument: run_server(tables=…): two tables for application 1: one "
        "table per application id",
        "refused: invalid argument: run_server(tables=…): a str, not a list of tables",
        "refused: invalid argument: run_server(tables=…): item 0 is 5 (int): expected a "
        "pslite.Table or a spec line (str)",
        "refused: invalid argument: run_server: a table serves application 0's float32 "
        "requests, and so would the handler",
        "refused: invalid argument: bad table spec 'app=0,dim=4,init=zeros,seed=0,"
        "opt=sgd:lr=0.01,admit=all,budget=100,evict=lru': budget: 100 holds no row",
    ]:
        assert want in out, out
