"""pslite.torch: embedding tables on the servers behind nn.Modules, tensors taken without a
copy, prefetch, and dense gradients summed through the servers (DistributedOptimizer)."""

import os
import sys
import threading
import time

import numpy as np
import pytest

try:
    import torch
except ImportError:
    # scripts/python-tests.sh (and so .ci/run) installs the extra and sets PSLITE_REQUIRE_TORCH:
    # there a missing torch fails every test here instead of skipping them.
    if os.environ.get("PSLITE_REQUIRE_TORCH") == "1":
        raise
    pytest.skip("pslite.torch needs the torch extra: pip install './python[torch]'",
                allow_module_level=True)

import pslite  # noqa: E402
import pslite.torch as pt  # noqa: E402
from conftest import binary, in_threads  # noqa: E402

# Keys far apart, so that two servers each own some.
IDS = [5, 1 << 62, (1 << 63) - 3]


def table_server(spec):
    return [binary("pslite-server"), "--table", spec]


def test_pushed_gradients_give_the_rows_sgd_says(cluster):
    """EmbeddingBag "sum" and "mean" and Embedding: backward pushes each unique id's summed
    gradient, and SGD on the servers gives rows = 0 - lr · gradient, exactly."""
    c = cluster(servers=2, server_cmd=table_server("app=1,dim=4,opt=sgd:lr=0.5"))
    with c.start() as po:
        kv = pslite.KVWorker(po, app_id=1)
        a, b, d = IDS
        ids = torch.tensor([[a, b], [b, d]])
        g = torch.tensor([[0.25, 0.5, 1.0, 2.0], [4.0, 8.0, 16.0, 32.0]])

        bag = pt.EmbeddingBag(kv, 4, mode="sum")
        out = bag(ids)
        assert out.shape == (2, 4) and out.dtype == torch.float32
        assert torch.equal(out, torch.zeros(2, 4))  # init=zeros
        (out * g).sum().backward()
        pt.flush(bag)
        keys = np.array(sorted(IDS), dtype=np.uint64)
        rows = np.empty(12, np.float32)
        kv.pull_into(keys, rows)
        want = -0.5 * torch.stack([g[0], g[0] + g[1], g[1]])
        assert np.array_equal(rows.reshape(3, 4), want.numpy())

        mean = pt.EmbeddingBag(kv, 4, mode="mean")
        (mean(torch.tensor([[a, a]])) * g[0]).sum().backward()  # a's gradient: 2 · g0 / 2
        pt.flush(mean)
        kv.pull_into(keys, rows)
        assert np.array_equal(rows.reshape(3, 4)[0], (want[0] - 0.5 * g[0]).numpy())

        emb = pt.Embedding(kv, 4)
        e = emb(torch.tensor([[d], [d]]))
        assert e.shape == (2, 1, 4)
        assert torch.equal(e[0, 0], want[2])
        e.sum().backward()  # d's gradient: two ones per value
        pt.flush(emb)
        kv.pull_into(keys, rows)
        assert np.array_equal(rows.reshape(3, 4)[2], (want[2] - 0.5 * 2).numpy())
        assert emb.stats["pushes"] == 1 and emb.stats["keys_pulled"] == 1
        po.barrier()
    c.wait()


def test_clock_bounds_the_rows_a_worker_reads(cluster):
    """pt.clock: each of two workers pushes a gradient of -1 to its own id per step (SGD lr=1:
    the row counts its steps) and clocks; with staleness τ the row of the other worker read
    after clock c counts at least c - τ steps and at most c + τ + 1; a slowed worker makes
    the other wait."""
    for tau in (0, 2):
        c = cluster(servers=1, workers=2,
                    server_cmd=table_server("app=1,dim=1,init=zeros,opt=sgd:lr=1"))
        seen = {}

        def worker():
            with c.start() as po:
                emb = pt.Embedding(pslite.KVWorker(po, app_id=1), 1)
                me, other = po.rank, 1 - po.rank
                counts, waited = [], 0.0
                for step in range(1, 9):
                    emb(torch.tensor([me])).sum().mul(-1.0).backward()
                    clock, w = pt.clock(emb, po, tau)
                    assert clock == step
                    waited += w
                    counts.append((step, float(emb(torch.tensor([other])).detach()[0, 0])))
                    if me == 1:
                        time.sleep(0.02)
                pt.flush(emb)
                po.clocks_done()
                seen[me] = (counts, waited)

        in_threads(worker)
        c.wait()
        for me in (0, 1):
            for step, n in seen[me][0]:
                # The other may have pushed its next step already, not more (τ = 0: it
                # pushed step or step + 1 times).
                assert step - tau <= n <= step + tau + 1, (tau, me, step, n)
        assert seen[0][1] > 0, "worker 0 waited for the slowed worker 1"


@pytest.mark.parametrize("mode,weighted", [("sum", False), ("sum", True), ("mean", False)])
def test_bags_with_offsets_match_torch_embedding_bag(cluster, mode, weighted):
    """1-D ids with offsets (bags of 2, 0, 3 and 1 ids; an id twice in a bag): the output and
    the gradient each row's table gets are torch's own EmbeddingBag's on the same rows."""
    c = cluster(servers=2, server_cmd=table_server("app=1,dim=3,init=uniform:-1:1,opt=sgd:lr=1"))
    with c.start() as po:
        kv = pslite.KVWorker(po, app_id=1)
        keys = np.array(sorted(IDS), dtype=np.uint64)
        before = np.empty(9, np.float32)
        kv.pull_into(keys, before)
        pos = torch.tensor([2, 0, 1, 1, 2, 0])  # positions in keys
        ids = torch.from_numpy(keys[pos.numpy()].astype(np.int64))
        offsets = torch.tensor([0, 2, 2, 5])
        psw = torch.tensor([0.5, 2.0, 1.0, -1.0, 4.0, 0.25]) if weighted else None
        g = torch.arange(12, dtype=torch.float32).view(4, 3) / 8

        bag = pt.EmbeddingBag(kv, 3, mode=mode)
        out = bag(ids, offsets, psw)
        (out * g).sum().backward()
        pt.flush(bag)

        weight = torch.from_numpy(before.reshape(3, 3).copy()).requires_grad_(True)
        want = torch.nn.functional.embedding_bag(pos, weight, offsets, mode=mode,
                                                 per_sample_weights=psw)
        (want * g).sum().backward()
        assert torch.allclose(out, want, atol=1e-6), (out, want)
        after = np.empty(9, np.float32)
        kv.pull_into(keys, after)
        assert np.allclose(before - after, weight.grad.numpy().ravel(), atol=1e-6)
        po.barrier()
    c.wait()


def test_uint64_ids_past_2_63_gather_their_own_rows(cluster):
    """64-bit hashes (uint64 tensors, ids ≥ 2^63 among them) are keys as they are: each
    output row is its own id's row, however torch orders them."""
    c = cluster(servers=2, server_cmd=table_server("app=1,dim=3,init=uniform:-1:1"))
    with c.start() as po:
        kv = pslite.KVWorker(po, app_id=1)
        raw = np.array([[2**64 - 5, 7], [2**63 + 1, 7], [2**63 - 1, 2**64 - 5]], np.uint64)
        out = pt.Embedding(kv, 3)(torch.from_numpy(raw))
        keys = np.unique(raw)  # uint64 order
        rows = np.empty(3 * len(keys), np.float32)
        kv.pull_into(keys, rows)
        row_of = {int(k): rows[3 * i:3 * i + 3] for i, k in enumerate(keys)}
        assert len(set(map(tuple, row_of.values()))) == len(keys)  # distinct initial rows
        for (i, j), k in np.ndenumerate(raw):
            assert np.array_equal(out[i, j].detach().numpy(), row_of[int(k)]), (i, j)
        po.barrier()
    c.wait()


class _Recording:
    """A KVWorker whose take_pulled answers are kept, to see where the rows live."""

    def __init__(self, kv):
        self.kv, self.pulled = kv, []

    def __getattr__(self, name):
        return getattr(self.kv, name)

    def take_pulled(self, ts):
        got = self.kv.take_pulled(ts)
        self.pulled.append(got[1])
        return got


def test_tensors_are_read_and_written_without_a_copy(cluster):
    """The rows a module gathers from are a tensor over the array pslite filled; a tensor is
    pushed from and pulled into where it lies."""
    c = cluster(servers=2, server_cmd=table_server("app=1,dim=2,init=uniform:-1:1"))
    with c.start() as po:
        kv = pslite.KVWorker(po, app_id=1)
        emb = pt.Embedding(kv, 2)
        emb.kv = _Recording(kv)
        rows, inverse = emb.lookup(torch.tensor([IDS[2], IDS[0], IDS[2]]))
        vals = emb.kv.pulled[-1]
        assert rows.data_ptr() == vals.ctypes.data and rows.shape == (2, 2)
        assert not vals.flags.owndata  # a view of the vector pslite filled
        assert inverse.tolist() == [1, 0, 1]

        keys = torch.tensor(sorted(IDS))  # int64 keys: taken as uint64
        out = torch.full((6,), -7.0)
        kv.pull_into(keys, out)  # written in place: the tensor is the output
        assert torch.equal(out.view(3, 2)[0], rows[0].detach())
        plain = pslite.KVWorker(po, app_id=0)
        grads = torch.arange(6, dtype=torch.float32, requires_grad=True)  # read via detach()
        plain.wait(plain.push(keys, grads, copy=False))
        summed = torch.zeros(6)
        plain.pull_into(keys, summed)
        assert torch.equal(summed, grads.detach())
        po.barrier()
    c.wait()


class _FakeCudaTensor:
    """A DLPack tensor on a GPU (this machine has none): device (kDLCUDA, 0)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("pslite must refuse before exporting")


def test_malformed_tensors_raise_the_rust_text(cluster):
    c = cluster(servers=1, server_cmd=table_server("app=1,dim=2"))
    with c.start() as po:
        kv = pslite.KVWorker(po, app_id=0)
        keys = torch.tensor([1, 2])
        strided = torch.arange(8, dtype=torch.float32)[::2]
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"vals: the tensor is not C-contiguous .* pass "
                                 r"vals\.contiguous\(\)"):
            kv.push(keys, strided)
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"vals: a tensor of float64, but this call carries float32: "
                                 r"convert it first, e\.g\. vals\.to\(torch\.float32\)"):
            kv.push(keys, torch.zeros(4, dtype=torch.float64))
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"vals: a tensor on cuda:0: pslite reads host memory only: "
                                 r"pass vals\.cpu\(\)"):
            kv.push(keys, _FakeCudaTensor())
        with pytest.raises(pslite.InvalidArgumentError, match=r"out: a tensor on cuda:0"):
            kv.pull_into(keys, _FakeCudaTensor())
        emb = pt.Embedding(pslite.KVWorker(po, app_id=1), 2)
        with pytest.raises(pslite.InvalidArgumentError,
                           match=r"ids: a tensor of float32, but this call carries uint64: "
                                 r"convert it first, e\.g\. ids\.long\(\)"):
            emb(torch.tensor([1.0, 2.0]))
        with pytest.raises(pslite.InvalidArgumentError, match=r"ids\[0\] = -1 is negative"):
            emb(torch.tensor([-1, 2]))
        # What a module's lookup starts with (no GPU here for a real torch tensor on one).
        with pytest.raises(pslite.InvalidArgumentError, match=r"ids: a tensor on cuda:0"):
            pslite._pslite.unique_keys(_FakeCudaTensor(), "ids")
        with pytest.raises(pslite.InvalidArgumentError, match=r"kv: a KVWorker of float64"):
            pt.Embedding(pslite.KVWorker(po, app_id=2, dtype=np.float64), 2)
        wrong_dim = pt.Embedding(pslite.KVWorker(po, app_id=1, customer_id=1), 3)
        with pytest.raises(pslite.InvalidArgumentError, match=r"is its dim 3\?"):
            wrong_dim(torch.tensor([1]))
        # The node goes on serving after every refusal.
        assert emb(torch.tensor([1])).shape == (1, 2)
        po.barrier()
    c.wait()


def test_prefetched_rows_are_one_step_stale_and_a_mismatch_pulls_again(cluster):
    c = cluster(servers=2, server_cmd=table_server("app=1,dim=2,opt=sgd:lr=1"))
    with c.start() as po:
        kv = pslite.KVWorker(po, app_id=1)
        emb = pt.Embedding(kv, 2)
        a = torch.tensor(IDS[:2])
        b = torch.tensor(IDS[1:])
        emb.prefetch(a)
        x = emb(a)  # served by the prefetch
        assert emb.stats["prefetched"] == 1 and torch.equal(x, torch.zeros(2, 2))
        emb.prefetch(a)  # the next batch's pull, sent before this step's push
        x.sum().backward()  # every row of a: -1 per value
        pt.flush(emb)
        stale = emb(a)
        assert emb.stats["prefetched"] == 2
        assert torch.equal(stale, torch.zeros(2, 2)), "the prefetch is read before the push"
        fresh = emb(a)
        assert torch.equal(fresh, -torch.ones(2, 2)), "a pull without prefetch sees it"

        emb.prefetch(b)
        got = emb(a)  # not what was prefetched: dropped, pulled again
        assert emb.stats["dropped"] == 1 and torch.equal(got, -torch.ones(2, 2))

        order = []
        batches = [torch.tensor([i]) for i in (7, 8, 9)]
        for batch in pt.prefetching(batches, lambda t: order.append(("prefetch", int(t)))):
            order.append(("step", int(batch)))
        assert order == [("prefetch", 7), ("prefetch", 8), ("step", 7), ("prefetch", 9),
                         ("step", 8), ("step", 9)]
        po.barrier()
    c.wait()


def test_distributed_optimizer_keeps_the_workers_weights_identical(cluster):
    """Two workers start from different weights and train on different data: after
    broadcast_parameters and three DistributedOptimizer steps their weights are equal bit for
    bit, and equal to one process's SGD on both workers' data."""
    c = cluster(servers=2, workers=2)
    data = [(torch.randn(8, 5, generator=torch.Generator().manual_seed(r)),
             torch.randn(8, 1, generator=torch.Generator().manual_seed(10 + r))) for r in (0, 1)]
    ends = {}
    seeding = threading.Lock()  # torch's generator is the process's: one model at a time

    def worker():
        with c.start() as po:
            with seeding:
                torch.manual_seed(100 + po.rank)
                model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(),
                                            torch.nn.Linear(3, 1))
            before = [p.detach().clone() for p in model.parameters()]
            kv = pslite.KVWorker(po, app_id=0, dtype=np.float64)
            pt.broadcast_parameters(model.state_dict(), kv)
            start = [p.detach().clone() for p in model.parameters()]
            opt = pt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          model.named_parameters(), kv)
            x, y = data[po.rank]
            for _ in range(3):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            ends[po.rank] = (before, start, [p.detach().clone() for p in model.parameters()])

    in_threads(worker)
    c.wait()
    (before0, start0, end0), (before1, start1, end1) = ends[0], ends[1]
    assert not torch.equal(before0[0], before1[0])
    assert all(torch.equal(p, q) for p, q in zip(start0, before0))
    assert all(torch.equal(p, q) for p, q in zip(start1, before0))
    assert all(torch.equal(p, q) for p, q in zip(end0, end1))

    ref = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    with torch.no_grad():
        for p, q in zip(ref.parameters(), before0):  # worker 0's, which the broadcast gave both
            p.copy_(q)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(ref(x), y) for x, y in data) / 2
        loss.backward()
        opt.step()
    for p, q in zip(ref.parameters(), end0):
        assert torch.allclose(p, q, atol=1e-6), (p, q)
    assert not torch.equal(start0[0], end0[0])


def test_click_log_and_auc():
    ids, labels, truth = pslite.click_log("test", 1000, shard=1, shards=2, fields=3, vocab=50)
    assert ids.shape == (500, 3) and ids.dtype == np.uint64 and (ids != 0).all()
    again, _, _ = pslite.click_log("test", 1000, fields=3, vocab=50)
    assert np.array_equal(again[1::2], ids)
    assert set(np.unique(labels)) <= {0.0, 1.0}
    assert pslite.auc(truth, labels) > 0.6
    assert pslite.auc(np.array([0.1, 0.9], np.float32), np.array([0, 1], np.float32)) == 1.0
    assert pslite.auc(torch.tensor([0.9, 0.1]), torch.tensor([0.0, 1.0])) == 0.0
    with pytest.raises(pslite.InvalidArgumentError, match="2 scores but 1 labels"):
        pslite.auc(np.zeros(2, np.float32), np.zeros(1, np.float32))
    with pytest.raises(pslite.InvalidArgumentError, match='split "valid"'):
        pslite.click_log("valid", 10)



RESTART_WORKER = r"""
import sys, time
import numpy as np, torch, pslite, pslite.torch as pt

with pslite.start() as po:
    emb = pt.EmbeddingBag(pslite.KVWorker(po, app_id=1), 2, mode="sum")
    lin = torch.nn.Linear(2, 1)
    dense = pslite.KVWorker(po, app_id=0, dtype=np.float64)
    pt.broadcast_parameters(lin.state_dict(), dense)
    opt = pt.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.01),
                                  lin.named_parameters(), dense)
    counts = {}
    ids_of = lambda s: torch.tensor([[s % 7, 1 << 62 | s % 5], [s % 3, (1 << 63) - 1 - s % 2]])
    steps = int(sys.argv[1])
    torch.manual_seed(po.rank)
    for step, ids in enumerate(pt.prefetching((ids_of(s) for s in range(steps)),
                                              emb.prefetch)):
        out = emb(ids)
        opt.zero_grad()
        # Each id's row gradient: ones; the dense part learns this worker's own noise.
        (out.sum() + (lin(out.detach()) - torch.randn(2, 1)).square().mean()).backward()
        opt.step()
        for i in ids.flatten().tolist():
            counts[i] = counts.get(i, 0) + po.num_workers  # every worker pushes the same ids
        print(f"step {step}", flush=True)
        time.sleep(0.02)
    pt.flush(emb)
    po.barrier()
    keys = np.array(sorted(counts), dtype=np.uint64)
    rows = np.empty(2 * len(keys), np.float32)
    emb.kv.pull_into(keys, rows)
    want = np.repeat([-0.5 * counts[int(k)] for k in keys], 2).astype(np.float32)
    assert np.array_equal(rows, want), (rows, want)
    print(f"rows exact after {steps} steps; dense {lin.weight.tolist()} {lin.bias.tolist()}",
          flush=True)
"""


def test_a_server_killed_mid_epoch_under_restart_does_not_fail_the_script(tmp_path):
    """pslite-launch --restart with checkpoints, 2 servers, 2 workers: server 0 is SIGKILLed
    while the workers train; its replacement restores the table and the dense part's running
    sums, the workers' requests are sent again, and the script ends with every row exactly as
    SGD on the pushed gradients says and the two workers' dense weights equal."""
    import os
    import re
    import signal
    import subprocess
    import time

    from conftest import ROOT

    script = tmp_path / "worker.py"
    script.write_text(RESTART_WORKER)
    cmd = [binary("pslite-launch"), "local", "--no-metrics", "--servers", "2", "--workers",
           "2", "--restart", "1", "--checkpoint-dir", str(tmp_path / "cp"), "--table",
           "app=1,dim=2,opt=sgd:lr=0.5", "--worker-cmd", f"{sys.executable} {script} 300"]
    env = dict(os.environ, PS_HEARTBEAT_TIMEOUT="60")
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        killed = None
        while killed is None and time.monotonic() < deadline:
            text = "".join(lines)
            server = re.search(r"started server 0 \(pid (\d+)\)", text)
            if server and "[worker 0] step 100" in text:
                killed = int(server.group(1))
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
        assert killed, "".join(lines)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
        reader.join(10)
    out = "".join(lines)
    assert p.returncode == 0, out
    assert re.search(r"started server 0 \(pid (?!%d\))\d+\)" % killed, out), out
    dense = [re.search(r"\[worker %d\] rows exact after 300 steps; dense (.*)" % r, out)
             for r in (0, 1)]
    assert all(dense), out
    assert dense[0].group(1) == dense[1].group(1), "the workers' dense weights differ"


def test_the_ctr_example_matches_its_single_process_reference():
    """examples/python/ctr_torch.py on 50 000 rows: S1W1 (prefetch on) reaches the test AUC of
    the same model trained in one process with nn.EmbeddingBag(sparse=True) within 0.005
    (one worker: the same batches in the same order, so the run is repeatable); S2W2, whose
    workers push in no fixed order, learns (AUC well above chance)."""
    import re
    import subprocess

    from conftest import ROOT

    import shlex

    ex = [sys.executable, "examples/python/ctr_torch.py", "--train", "50000", "--test", "5000"]
    ref = subprocess.run([*ex, "--reference"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    want = float(re.search(r"final test AUC (0\.\d+)", ref.stdout).group(1))
    spec = subprocess.run([*ex, "--print-table"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()

    def launched(servers, workers, *more):
        r = subprocess.run([binary("pslite-launch"), "local", "--no-metrics", "--servers",
                            str(servers), "--workers", str(workers), "--table", spec,
                            "--worker-cmd", shlex.join([*ex, *more])],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        got = re.findall(r"\[worker 0\] epoch 1: test AUC (0\.\d+)", r.stdout)
        assert len(got) == 1, r.stdout
        return float(got[0]), r.stdout

    auc, out = launched(1, 1)
    assert abs(auc - want) <= 0.005, (auc, want, out)
    # Every training step's lookup was prefetched (97 steps of 512 rows); evaluation's not.
    assert re.search(r"; 97 of \d+ lookups prefetched", out), out
    auc2, out = launched(2, 2, "--threads", "1")
    assert auc2 > 0.7, out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
