"""A DLRM-style click model (Naumov et al. 2019) in PyTorch whose embeddings live on pslite's
servers, trained on the repository's synthetic click log (``pslite.click_log``, the data of
``pslite-launch … ctr``).

The model: an embedding bag per field (one id per field and sample here, as in Criteo's
categorical features; one server table holds every field's rows, since the feature ids are
hashes of field and id), the pairwise dot products of the fields' embeddings (DLRM's
interaction), and an MLP on the embeddings and the dot products. Embeddings:
``pslite.torch.EmbeddingBag`` over a table with AdaGrad on the servers. The MLP: on every
worker, ``pslite.torch.DistributedOptimizer`` around ``torch.optim.Adagrad`` (gradients averaged
through the servers). With ``--reference`` the same model trains in this one process on
``torch.nn.EmbeddingBag(sparse=True)`` and ``torch.optim.Adagrad``, the same data and epochs.

Run (the table spec is what ``--print-table`` prints for the same options)::

    pslite-launch local --servers 2 --workers 2 \\
        --table "$(python examples/python/ctr_torch.py --print-table)" \\
        --worker-cmd 'python examples/python/ctr_torch.py'
    python examples/python/ctr_torch.py --reference

Worker r trains on rows i of the training set with i mod W = r, ``--batch`` rows per step (every
worker the same number of steps); after each epoch worker 0 evaluates the test set and prints
test AUC, log-loss and this worker's training samples/s. ``scripts/ctr-torch.sh`` runs both and
prints the comparison.
"""

import argparse
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", type=int, default=200_000, help="training rows, all workers")
    p.add_argument("--test", type=int, default=20_000, help="test rows")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=512, help="rows per step and worker")
    p.add_argument("--dim", type=int, default=8, help="embedding dim (the table's)")
    p.add_argument("--fields", type=int, default=26)
    p.add_argument("--vocab", type=int, default=100_000, help="largest field's vocabulary")
    p.add_argument("--seed", type=int, default=1, help="click log and MLP seed")
    p.add_argument("--lr", type=float, default=0.05, help="AdaGrad rate, table and MLP")
    p.add_argument("--init-std", type=float, default=0.01, help="embeddings' initial std")
    p.add_argument("--app", type=int, default=1, help="the table's application id")
    p.add_argument("--dense-app", type=int, default=0,
                   help="application of the servers' sum handler, for the MLP's gradients")
    p.add_argument("--no-prefetch", action="store_true",
                   help="pull each batch's rows when it starts, not during the step before")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--reference", action="store_true",
                   help="train in this process with torch.nn.EmbeddingBag(sparse=True)")
    p.add_argument("--print-table", action="store_true",
                   help="print the table spec for pslite-launch --table and exit")
    p.add_argument("--require-auc", type=float, default=None,
                   help="exit 1 unless the final test AUC reaches this")
    return p.parse_args(argv)


def table_spec(a):
    return (f"app={a.app},dim={a.dim},init=normal:0:{a.init_std},seed={a.seed},"
            f"opt=adagrad:lr={a.lr}:eps=1e-10:init_acc=0")


class Top(nn.Module):
    """DLRM's interaction and top MLP: (B, F, d) embeddings → (B,) logits."""

    def __init__(self, fields, dim):
        super().__init__()
        self.register_buffer("pairs", torch.triu_indices(fields, fields, 1), persistent=False)
        width = fields * dim + self.pairs.shape[1]
        self.mlp = nn.Sequential(nn.Linear(width, 128), nn.ReLU(), nn.Linear(128, 64),
                                 nn.ReLU(), nn.Linear(64, 1))

    def forward(self, e):
        dots = torch.bmm(e, e.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.mlp(torch.cat([e.flatten(1), dots], 1)).squeeze(1)


def batches(ids, labels, batch, steps):
    """(flat ids, labels) of each step; ids as a tensor over the array, no copy."""
    for j in range(steps):
        rows = slice(j * batch, (j + 1) * batch)
        yield torch.from_numpy(ids[rows]).reshape(-1), torch.from_numpy(labels[rows])


def evaluate(bags, top, ids, labels, fields, dim):
    """Test AUC and mean log-loss of the model on (ids, labels)."""
    import pslite

    bags.eval()
    top.eval()
    scores = []
    with torch.no_grad():
        for x, _ in batches(ids, labels, 4096, -(-len(labels) // 4096)):
            n = x.numel() // fields
            e = bags(x, torch.arange(0, n * fields)).view(n, fields, dim)
            scores.append(torch.sigmoid(top(e)))
    bags.train()
    top.train()
    p = torch.cat(scores).clamp(1e-7, 1 - 1e-7)
    y = torch.from_numpy(labels)
    loss = float(F.binary_cross_entropy(p, y))
    return pslite.auc(p, y), loss


def train(a, bags, top, opt, ids, labels, prefetch=None, on_epoch=None):
    """Trains ``a.epochs`` epochs of ``len(labels) // a.batch`` steps; returns samples/s of the
    training steps (evaluation excluded)."""
    steps = len(labels) // a.batch
    offsets = torch.arange(0, a.batch * a.fields)
    elapsed = 0.0
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        todo = batches(ids, labels, a.batch, steps)
        if prefetch is not None:
            todo = prefetch(todo)
        for x, y in todo:
            e = bags(x, offsets).view(a.batch, a.fields, a.dim)
            loss = F.binary_cross_entropy_with_logits(top(e), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        elapsed += time.perf_counter() - t0
        if on_epoch is not None:
            on_epoch(epoch, steps * a.batch * epoch / elapsed)
    return steps * a.batch * a.epochs / elapsed


def report(epoch, auc, loss, rate, extra=""):
    print(f"epoch {epoch}: test AUC {auc:.4f}, log-loss {loss:.4f}, "
          f"{rate:.0f} samples/s{extra}", flush=True)


def reference(a):
    """The same model and data in one process: nn.EmbeddingBag(sparse=True) and Adagrad."""
    import pslite

    train_ids, train_y, _ = pslite.click_log("train", a.train, seed=a.seed, fields=a.fields,
                                             vocab=a.vocab)
    test_ids, test_y, truth = pslite.click_log("test", a.test, seed=a.seed, fields=a.fields,
                                               vocab=a.vocab)
    vocab, index = np.unique(np.concatenate([train_ids.ravel(), test_ids.ravel()]),
                             return_inverse=True)
    index = index.astype(np.int64)
    train_ix = index[:train_ids.size].reshape(train_ids.shape)
    test_ix = index[train_ids.size:].reshape(test_ids.shape)
    torch.manual_seed(a.seed)
    bags = nn.EmbeddingBag(len(vocab), a.dim, mode="sum", sparse=True)
    nn.init.normal_(bags.weight, 0.0, a.init_std)
    top = Top(a.fields, a.dim)
    sparse = torch.optim.Adagrad(bags.parameters(), lr=a.lr, eps=1e-10)
    dense = torch.optim.Adagrad(top.parameters(), lr=a.lr, eps=1e-10)

    class Both:
        def zero_grad(self):
            sparse.zero_grad()
            dense.zero_grad()

        def step(self):
            sparse.step()
            dense.step()

    # The W=1 worker's steps: the same rows, batches and order.
    rows = len(train_y) // a.batch * a.batch

    def on_epoch(epoch, rate):
        auc, loss = evaluate(bags, top, test_ix, test_y, a.fields, a.dim)
        report(epoch, auc, loss, rate, f"; best possible AUC {pslite.auc(truth, test_y):.4f}")

    rate = train(a, bags, top, Both(), train_ix[:rows], train_y[:rows], on_epoch=on_epoch)
    auc, _ = evaluate(bags, top, test_ix, test_y, a.fields, a.dim)
    print(f"reference (one process, nn.EmbeddingBag sparse): final test AUC {auc:.4f}, "
          f"{rate:.0f} samples/s", flush=True)
    return auc


def distributed(a):
    """A worker of a pslite job (pslite-launch sets its role and cluster)."""
    import pslite
    import pslite.torch as pt

    with pslite.start() as po:
        rank, workers = po.rank, po.num_workers
        ids, labels, _ = pslite.click_log("train", a.train, shard=rank, shards=workers,
                                          seed=a.seed, fields=a.fields, vocab=a.vocab)
        # Every worker takes the same number of steps (the dense part meets at each).
        rows = a.train // workers // a.batch * a.batch
        ids, labels = ids[:rows], labels[:rows]
        test_ids = test_y = truth = None
        if rank == 0:
            test_ids, test_y, truth = pslite.click_log("test", a.test, seed=a.seed,
                                                       fields=a.fields, vocab=a.vocab)
        bags = pt.EmbeddingBag(pslite.KVWorker(po, app_id=a.app), a.dim, mode="sum")
        torch.manual_seed(a.seed)
        top = Top(a.fields, a.dim)
        dense_kv = pslite.KVWorker(po, app_id=a.dense_app, dtype=np.float64)
        pt.broadcast_parameters(top.state_dict(), dense_kv)
        opt = pt.DistributedOptimizer(torch.optim.Adagrad(top.parameters(), lr=a.lr, eps=1e-10),
                                      top.named_parameters(), dense_kv)
        prefetch = None
        if not a.no_prefetch:
            def prefetch(todo):
                return pt.prefetching(todo, lambda b: bags.prefetch(b[0]))
        final = []

        def on_epoch(epoch, rate):
            pt.flush(bags)
            po.barrier()  # every worker's pushes applied
            if rank == 0:
                auc, loss = evaluate(bags, top, test_ids, test_y, a.fields, a.dim)
                s = bags.stats
                report(epoch, auc, loss, rate,
                       f" (this worker); best possible AUC {pslite.auc(truth, test_y):.4f}; "
                       f"{s['prefetched']} of {s['pulls']} lookups prefetched")
                final[:] = [auc]
            else:
                print(f"epoch {epoch}: {rate:.0f} samples/s (this worker)", flush=True)
            po.barrier()

        rate = train(a, bags, top, opt, ids, labels, prefetch=prefetch, on_epoch=on_epoch)
        print(f"worker {rank} of {workers}: {rate:.0f} samples/s, "
              f"prefetch {'off' if a.no_prefetch else 'on'}", flush=True)
        return final[0] if final else None


def main(argv=None):
    a = parse(argv)
    if a.print_table:
        print(table_spec(a))
        return 0
    if a.threads:
        torch.set_num_threads(a.threads)
    auc = reference(a) if a.reference else distributed(a)
    if a.require_auc is not None and auc is not None and auc < a.require_auc:
        print(f"test AUC {auc:.4f} is below --require-auc {a.require_auc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
