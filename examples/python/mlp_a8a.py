"""Data-parallel multilayer perceptron on a8a, trained through pslite.

A 123 -> 64 (ReLU) -> 1 (sigmoid) network in NumPy, logistic loss. The four tensors
(W1, b1, W2, b2) are four keys spread over the servers, each holding a whole tensor. The
servers run the default handler, which sums every push into the stored value, so a worker
applies SGD by pushing `-lr * grad / num_workers`: rank 0 pushes the initial weights, then
every step each worker pulls the weights, computes the gradient of a minibatch of its shard
and pushes the update (one push-pull round trip, which also returns the updated weights).
After each epoch rank 0 prints the test accuracy.

Run from the repository root, with the package installed by `pip install ./python`:

    pslite-launch local --servers 2 --workers 2 --worker-cmd 'python examples/python/mlp_a8a.py'

Options: --epochs, --batch, --lr, --seed, --data DIR (holding a8a.train and a8a.test),
--require ACC (exit with status 1 if rank 0's final test accuracy is below ACC).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import pslite

FEATURES, HIDDEN = 123, 64
# One key per tensor, a quarter of the key space apart, so that they land on every server
# (keys are range-partitioned over [0, 2^64)). Sorted, as every call needs.
KEYS = np.array([i << 62 for i in range(4)], dtype=np.uint64)  # W1, b1, W2, b2
SHAPES = [(FEATURES, HIDDEN), (HIDDEN,), (HIDDEN,), (1,)]
LENS = [int(np.prod(s)) for s in SHAPES]  # values per key: 7872, 64, 64, 1


def load_libsvm(path):
    """Reads a LIBSVM file with labels +1/-1 and 1-based feature ids into a dense
    (n, 123) float32 matrix and a (n,) float32 vector of labels 0/1."""
    labels, rows = [], []
    with open(path) as f:
        for line in f:
            label, *feats = line.split()
            labels.append(1.0 if float(label) > 0 else 0.0)
            rows.append([(int(i) - 1, float(v)) for i, v in (t.split(":") for t in feats)])
    x = np.zeros((len(rows), FEATURES), dtype=np.float32)
    for r, feats in enumerate(rows):
        for i, v in feats:
            x[r, i] = v
    return x, np.array(labels, dtype=np.float32)


def views(flat):
    """Splits a flat buffer (all keys' values in key order) into the tensors W1, b1, W2, b2
    (views, so that filling the buffer fills them)."""
    bounds = np.cumsum([0] + LENS)
    return [flat[a:b].reshape(s) for a, b, s in zip(bounds[:-1], bounds[1:], SHAPES)]


def forward(params, x):
    """x: (n, 123). Returns the hidden activations h (n, 64) and the logits z (n,)."""
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)  # (n, 64)
    return h, h @ w2 + b2[0]  # (n,)


def log_loss(z, y):
    """Mean logistic loss of logits z (n,) against labels y (n,) in {0, 1}, computed stably."""
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def gradient(params, grads, x, y):
    """Writes the gradient of the mean logistic loss over the minibatch x (b, 123), y (b,)
    into `grads` (views of one flat buffer, shaped as `params`)."""
    w1, _, w2, _ = params
    g_w1, g_b1, g_w2, g_b2 = grads
    h, z = forward(params, x)
    dz = (1.0 / (1.0 + np.exp(-z)) - y) / len(y)  # (b,): d loss / d z
    g_w2[:] = h.T @ dz  # (64,)
    g_b2[0] = dz.sum()
    dh = np.outer(dz, w2) * (h > 0)  # (b, 64): back through the ReLU
    g_w1[:] = x.T @ dh  # (123, 64)
    g_b1[:] = dh.sum(axis=0)  # (64,)


def evaluate(params, x, y):
    """Returns (accuracy, mean logistic loss) of the model on x (n, 123), y (n,)."""
    _, z = forward(params, x)
    return float(np.mean((z > 0) == (y > 0.5))), log_loss(z, y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path,
                    default=Path(__file__).resolve().parents[2] / "data" / "a8a")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--require", type=float, metavar="ACC",
                    help="exit with status 1 if the final test accuracy is below ACC")
    args = ap.parse_args()

    x_train, y_train = load_libsvm(args.data / "a8a.train")  # (22696, 123), (22696,)
    x_test, y_test = load_libsvm(args.data / "a8a.test")  # (9865, 123), (9865,)

    with pslite.start() as po:
        rank, workers = po.rank, po.num_workers
        kv = pslite.KVWorker(po, dtype=np.float32)
        flat = np.zeros(sum(LENS), dtype=np.float32)  # all weights, key order
        params = views(flat)
        grad_flat = np.zeros_like(flat)
        grads = views(grad_flat)

        if rank == 0:  # a key's first push stores it: He init for W1, LeCun for W2, zero biases
            rng = np.random.default_rng(args.seed)
            params[0][:] = rng.normal(0.0, np.sqrt(2.0 / FEATURES), (FEATURES, HIDDEN))
            params[2][:] = rng.normal(0.0, np.sqrt(1.0 / HIDDEN), HIDDEN)
            kv.wait(kv.push(KEYS, flat, LENS))
        po.barrier()
        kv.pull_into(KEYS, flat)  # one call for all keys: lens are those stored

        # This worker's shard: rows r with r % workers == rank. Every worker takes as many
        # steps per epoch as the smallest shard allows, so that they finish epochs together.
        shard = np.arange(rank, len(y_train), workers)
        steps = (len(y_train) // workers) // args.batch
        rng = np.random.default_rng(args.seed + 1 + rank)
        scale = np.float32(-args.lr / workers)
        acc, start = 0.0, time.perf_counter()
        for epoch in range(1, args.epochs + 1):
            order = rng.permutation(shard)
            for step in range(steps):
                batch = order[step * args.batch:(step + 1) * args.batch]
                gradient(params, grads, x_train[batch], y_train[batch])
                grad_flat *= scale  # the update the servers add to the weights
                # Push the update and pull the weights it produced (with every other
                # worker's updates so far) for the next step.
                kv.push_pull_into(KEYS, grad_flat, flat, LENS)
            po.barrier()  # every worker's updates of this epoch are in
            kv.pull_into(KEYS, flat)
            po.barrier()  # every worker holds the same weights before the next epoch starts
            acc, loss = evaluate(params, x_test, y_test)
            if rank == 0:
                print(f"epoch {epoch}: test accuracy {acc:.4f} (loss {loss:.4f}) "
                      f"[{time.perf_counter() - start:.1f} s]", flush=True)
        if rank == 0:
            print(f"final test accuracy {acc:.4f}", flush=True)

    if rank == 0 and args.require is not None and acc < args.require:
        print(f"error: final test accuracy {acc:.4f} is below the required {args.require}",
              file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
