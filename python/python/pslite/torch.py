"""PyTorch over pslite: embedding tables on the servers as ``nn.Module``s, and dense gradients
summed through the servers. Install with ``pip install './python[torch]'`` (CPU PyTorch is
enough).

**Sparse part.** :class:`Embedding` and :class:`EmbeddingBag` look rows up in a table the
servers hold (``pslite-server --table app=1,dim=16,opt=adagrad:lr=0.05``; a float32
:class:`pslite.KVWorker` on the table's application). Forward: the batch's ids are made unique
(pslite's ``unique_keys``, a hash table in Rust), their rows pulled in one request, and the
result is a tensor over pslite's own receive buffer (no copy); the lookup gathers from it.
Backward: the gradient of those rows, summed per unique id (``_Gather``'s backward), is
pushed; the table's optimizer on the servers applies it, one step per pushed key. The
modules have no local parameters: ``model.parameters()`` holds only the dense part.

**Prefetch.** ``module.prefetch(next_ids)`` sends the next batch's pull while this batch
computes; the next forward with equal ids takes it. The prefetched rows were read before this
step's gradient was applied: rows of ids in both batches are one step stale (staleness τ = 1),
as in Persia's and Monolith's pipelined lookups. ``module.stats`` counts the prefetched
lookups, so that is measurable. :func:`prefetching` wraps a DataLoader to do it.

**Dense part.** :class:`DistributedOptimizer` (BytePS's, Jiang et al. 2020): each step the
workers' gradients are summed through the servers (the "sum" handler, float64) and averaged,
then every worker runs the same local optimizer step on the same averaged gradient, so the
workers' weights stay identical; :func:`broadcast_parameters` makes them equal at the start.
The dense weights stay on the workers rather than in a server table because a dense layer's
gradient is dense: every worker would push and pull every value each step anyway, and keeping
the optimizer local lets any ``torch.optim`` optimizer run unchanged (a learning-rate scheduler
takes ``opt.optimizer``).

**Pushes in flight.** A module's pushes are sent without waiting; the next forward collects
them, and :func:`flush` waits for all of a model's. Call ``flush(model)`` before a barrier
after which another worker reads the rows (evaluation, the end of an epoch).

Example (a worker under ``pslite-launch local --servers 1 --workers 2 --table
app=1,dim=8,opt=sgd:lr=0.1 --worker-cmd 'python train.py'``)::

    import numpy as np, torch, pslite, pslite.torch as pt

    with pslite.start() as po:
        emb = pt.EmbeddingBag(pslite.KVWorker(po, app_id=1), dim=8, mode="sum")
        mlp = torch.nn.Linear(8, 1)
        dense = pslite.KVWorker(po, app_id=0, dtype=np.float64)
        pt.broadcast_parameters(mlp.named_parameters(), dense)
        opt = pt.DistributedOptimizer(torch.optim.SGD(mlp.parameters(), lr=0.1),
                                      mlp.named_parameters(), dense)
        ids = torch.tensor([[3, 7], [7, 9]])            # 2 bags of 2 ids
        loss = mlp(emb(ids)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()   # rows pushed, dense grads summed
        pt.flush(emb)
"""

import collections
import hashlib
from typing import (Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, TypeVar, Union)

import numpy as np
import torch
from torch import Tensor, nn

from ._errors import InvalidArgumentError
from ._pslite import WORKER_GROUP, KVWorker, Postoffice, unique_keys

__all__ = ["DistributedOptimizer", "Embedding", "EmbeddingBag", "broadcast_parameters",
           "clock", "flush", "prefetching"]

#: Prefetched pulls a module keeps at most; older ones are dropped (their rows discarded).
MAX_PREFETCHED = 4

#: Values per key of the dense part's requests: 2^19 float64 values, 4 MiB.
CHUNK = 1 << 19


def _bad(text: str) -> InvalidArgumentError:
    """An argument refused here, worded as pslite's own InvalidArgumentError texts are."""
    return InvalidArgumentError(f"invalid argument: {text}")


def _signed(ids: Tensor) -> Tensor:
    """``ids`` as pslite reads keys: int32 widened to int64, the others as they are (pslite
    refuses what it cannot take, with its text)."""
    return ids.long() if ids.dtype == torch.int32 else ids


def _unique(ids: Tensor) -> Tuple[Tensor, np.ndarray, Tensor]:
    """``(ids, keys, inverse)``: ``ids`` as :func:`_signed`, its distinct values as keys
    sorted as uint64 (pslite's ``unique_keys``: a hash table and a sort, in Rust, without the
    GIL), and int64 ``inverse`` of ``ids``' shape with ``keys[inverse] == ids``."""
    signed = _signed(ids)
    keys, inverse = unique_keys(signed, "ids")
    return signed, keys, torch.from_numpy(inverse).view(ids.shape)


class _Pull:
    """One pull of a batch's unique ids: sent, and taken once."""

    __slots__ = ("given", "ids", "unique", "inverse", "ts")

    def __init__(self, given: Tensor, ids: Tensor, unique: np.ndarray, inverse: Tensor,
                 ts: Optional[int]):
        self.given = given
        self.ids = ids
        self.unique = unique
        self.inverse = inverse
        self.ts = ts


class _TableModule(nn.Module):
    """What Embedding and EmbeddingBag share: pulls, prefetches and pushes of one table."""

    def __init__(self, kv: KVWorker, dim: int):
        super().__init__()
        if not isinstance(kv, KVWorker):
            raise _bad(f"kv: expected a pslite.KVWorker, got {type(kv).__name__}")
        if kv.dtype != np.float32:
            raise _bad(f"kv: a KVWorker of {kv.dtype}; a table's rows are float32: "
                       "make it with dtype=numpy.float32")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise _bad(f"dim={dim!r}: expected an int ≥ 1 (the table's dim)")
        self.kv = kv
        self.dim = dim
        self._prefetched: Deque[_Pull] = collections.deque()
        self._pushes: List[int] = []
        #: Counters: ``pulls`` (forward lookups), ``prefetched`` (of them, served by a
        #: prefetch), ``dropped`` (prefetches never used), ``pushes``, ``keys_pulled``.
        self.stats: Dict[str, int] = dict(pulls=0, prefetched=0, dropped=0, pushes=0,
                                          keys_pulled=0)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"

    def _send_pull(self, ids: Tensor) -> _Pull:
        if not isinstance(ids, Tensor):
            raise _bad(f"ids: expected a torch.Tensor of int64 ids, got {type(ids).__name__}")
        signed, unique, inverse = _unique(ids)
        # pslite checks the keys (device, dtype, sign) and raises with its own text.
        ts = self.kv.pull(unique) if unique.size else None
        return _Pull(ids, signed, unique, inverse, ts)

    def prefetch(self, ids: Tensor) -> None:
        """Sends the pull of ``ids`` (as ``forward``'s, the next forward's) now; the next
        forward with equal ids uses its rows, read before this step's push (one step stale).

        Raises pslite.InvalidArgumentError as ``forward``."""
        self._prefetched.append(self._send_pull(ids))
        while len(self._prefetched) > MAX_PREFETCHED:
            self._drop(self._prefetched.popleft())

    def _drop(self, p: _Pull) -> None:
        if p.ts is not None:
            self.kv.take_pulled(p.ts)
        self.stats["dropped"] += 1

    def _take_prefetched(self, ids: Tensor) -> Optional[_Pull]:
        while self._prefetched:
            p = self._prefetched.popleft()
            if p.given is ids or (p.ids.shape == ids.shape and torch.equal(p.ids, _signed(ids))):
                return p
            self._drop(p)
        return None

    def _collect_pushes(self) -> None:
        pushes, self._pushes = self._pushes, []
        for ts in pushes:
            self.kv.wait(ts)

    def flush(self) -> None:
        """Waits until the servers applied every push of this module.

        Raises pslite.Error with a server's text, TimeoutError, PeerLostError."""
        self._collect_pushes()

    def lookup(self, ids: Tensor) -> Tuple[Tensor, Tensor]:
        """``(rows, inverse)``: the rows of ``ids``' n unique ids (sorted), float32 (n, dim), a
        tensor over pslite's receive buffer (no copy), and int64 ``inverse`` of ``ids``' shape
        indexing them (``rows[inverse]`` is the lookup). In training mode with grad enabled,
        ``rows`` requires grad and its gradient is pushed to the table. What ``forward``
        gathers from; raises as ``forward``."""
        self.stats["pulls"] += 1
        p = self._take_prefetched(ids)
        if p is not None:
            self.stats["prefetched"] += 1
        else:
            p = self._send_pull(ids)
        self._collect_pushes()
        if p.ts is None:
            rows = torch.zeros(0, self.dim)
        else:
            _keys, vals, _lens = self.kv.take_pulled(p.ts)
            if vals.size != p.unique.size * self.dim:
                raise _bad(f"the table answered {vals.size} values for {p.unique.size} ids, "
                           f"not {self.dim} per id: is its dim {self.dim}?")
            rows = torch.from_numpy(vals).view(-1, self.dim)
        self.stats["keys_pulled"] += p.unique.size
        if torch.is_grad_enabled() and self.training and rows.numel():
            rows.requires_grad_(True)
            unique = p.unique
            rows.register_hook(lambda grad: self._push(unique, grad))
        return rows, p.inverse

    def _push(self, unique: np.ndarray, grad: Tensor) -> None:
        # Copied into the message: autograd may keep this very tensor as rows.grad and add a
        # second backward's gradient into it in place.
        ts = self.kv.push(unique, grad.detach().to(torch.float32).contiguous())
        self._pushes.append(ts)
        self.stats["pushes"] += 1


class _Gather(torch.autograd.Function):
    """``rows[index]`` whose backward sums the gradient per row with one accumulating
    ``index_put_``: cheaper on CPU than the dense backward of ``embedding_bag``, which sorts
    the indices first."""

    @staticmethod
    def forward(ctx: Any, rows: Tensor, index: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(index)
        ctx.n = rows.shape[0]
        return rows.index_select(0, index)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None]:  # type: ignore[override]
        (index,) = ctx.saved_tensors
        summed = grad.new_zeros(ctx.n, grad.shape[1])
        summed.index_put_((index,), grad, accumulate=True)
        return summed, None


def _gather(rows: Tensor, inverse: Tensor) -> Tensor:
    """The rows of ``inverse`` (any shape) → ``inverse.shape + (dim,)``."""
    flat = inverse.reshape(-1)
    return _Gather.apply(rows, flat).view(*inverse.shape, rows.shape[1])


class Embedding(_TableModule):
    """``torch.nn.Embedding`` whose rows live in a server-side table.

    ``kv``: a float32 :class:`pslite.KVWorker` on the table's application; ``dim``: the
    table's dim. ``forward(ids)``: ids of any shape, each a uint64 key of the table: int64
    (each ≥ 0; int32 taken) or uint64 (64-bit hashes such as :func:`pslite.click_log`'s) →
    float32 of shape ``ids.shape + (dim,)``. In training mode with grad
    enabled, backward pushes the rows' gradient (summed per unique id) to the table, whose
    optimizer applies it.

    Raises pslite.InvalidArgumentError with pslite's text for ids it cannot take as keys (a
    float tensor: "keys: a tensor of float32, but this call carries uint64 …", a negative id,
    a GPU tensor: "keys: a tensor on cuda:0: pslite reads host memory only …"), and for a
    table whose dim differs; pslite.Error, TimeoutError or PeerLostError from the pull.
    """

    def forward(self, ids: Tensor) -> Tensor:
        rows, inverse = self.lookup(ids)
        return _gather(rows, inverse)


class EmbeddingBag(_TableModule):
    """``torch.nn.EmbeddingBag`` whose rows live in a server-side table: each bag's rows
    reduced by ``mode`` ("sum" or "mean").

    ``forward(input, offsets=None, per_sample_weights=None)`` as ``nn.EmbeddingBag``'s:
    ``input`` ids (as :class:`Embedding`'s) of shape (B, L) (B bags of L ids), or 1-D with
    ``offsets`` int64 (B,) (bag i starts at ``offsets[i]``; an empty bag gives zeros) →
    float32 (B, dim). ``per_sample_weights`` (float32,
    ``input``'s shape) only with mode "sum". Backward and errors as :class:`Embedding`.
    """

    def __init__(self, kv: KVWorker, dim: int, mode: str = "sum"):
        super().__init__(kv, dim)
        if mode not in ("sum", "mean"):
            raise _bad(f"mode={mode!r}: expected \"sum\" or \"mean\"")
        self.mode = mode

    def extra_repr(self) -> str:
        return f"dim={self.dim}, mode={self.mode!r}"

    def forward(self, input: Tensor, offsets: Optional[Tensor] = None,
                per_sample_weights: Optional[Tensor] = None) -> Tensor:
        if not isinstance(input, Tensor):
            raise _bad(f"input: expected a torch.Tensor of ids, got {type(input).__name__}")
        if input.dim() == 2:
            if offsets is not None:
                raise _bad("offsets: only with 1-D input (2-D input is (bags, ids per bag))")
        elif input.dim() != 1 or offsets is None or offsets.dim() != 1:
            raise _bad(f"input of shape {tuple(input.shape)}: expected (B, L), or 1-D ids with "
                       "1-D offsets")
        if per_sample_weights is not None:
            if self.mode != "sum":
                raise _bad("per_sample_weights: only with mode=\"sum\"")
            if per_sample_weights.shape != input.shape:
                raise _bad(f"per_sample_weights of shape {tuple(per_sample_weights.shape)}: "
                           f"expected input's, {tuple(input.shape)}")
        rows, inverse = self.lookup(input)
        each = _gather(rows, inverse)
        if per_sample_weights is not None:
            each = each * per_sample_weights.unsqueeze(-1)
        if input.dim() == 2:
            return each.sum(1) if self.mode == "sum" else each.mean(1)
        assert offsets is not None
        n, bags = input.shape[0], offsets.shape[0]
        if bags == n and torch.equal(offsets, torch.arange(n, dtype=offsets.dtype)):
            return each  # one id per bag: the sum and the mean are the row
        ends = torch.cat([offsets[1:], offsets.new_tensor([n])])
        lengths = ends - offsets
        if bool((lengths < 0).any()) or (bags and (int(offsets[0]) != 0 or int(ends[-1]) > n)):
            raise _bad(f"offsets: expected non-decreasing starts from 0 within the {n} ids")
        bag_of = torch.repeat_interleave(torch.arange(bags), lengths)
        out = each.new_zeros(bags, self.dim).index_add(0, bag_of, each)
        if self.mode == "mean":
            out = out / lengths.clamp(min=1).unsqueeze(-1).to(out.dtype)
        return out


def _tables(model: nn.Module) -> Iterator[_TableModule]:
    return (m for m in model.modules() if isinstance(m, _TableModule))


def flush(model: nn.Module) -> None:
    """Waits until the servers applied every push of every :class:`Embedding` and
    :class:`EmbeddingBag` in ``model`` (the module itself or any container of them).

    Raises as the modules' ``flush``."""
    for m in _tables(model):
        m.flush()


def clock(model: nn.Module, po: Postoffice, staleness: Optional[int]) -> Tuple[int, float]:
    """Bounded staleness (SSP, Ho et al. 2013) for a training loop: call it once per step.
    Waits until the servers applied this step's pushes of every table module in ``model``
    (:func:`flush`), then advances this worker's clock (``po.clock``) and waits while the
    slowest worker is more than ``staleness`` steps behind (0: the workers in lock step;
    None: never). Returns ``(clock, seconds waited)``.

    Raises as :func:`flush` and ``Postoffice.clock`` (TimeoutError naming the slowest worker
    after PS_TIMEOUT)."""
    flush(model)
    result: Tuple[int, float] = po.clock(staleness)
    return result


B = TypeVar("B")


def prefetching(batches: Iterable[B], prefetch: Callable[[B], None]) -> Iterator[B]:
    """Yields ``batches`` (a DataLoader, any iterable) unchanged, calling ``prefetch(batch)``
    for the batch after the one yielded, before yielding it: its pulls fly while this batch
    computes. ``prefetch`` calls the modules' ``prefetch`` with the batch's ids, e.g.
    ``lambda b: emb.prefetch(b[0])``. Rows are one step stale (module docs).
    """
    it = iter(batches)
    end = object()
    cur: Any = next(it, end)
    if cur is end:
        return
    prefetch(cur)
    while True:
        nxt: Any = next(it, end)
        if nxt is not end:
            prefetch(nxt)
        yield cur
        if nxt is end:
            return
        cur = nxt


def _key(*parts: Any) -> int:
    """A uint64 key of ``parts`` (BLAKE2b, 8 bytes): spread over the servers' key ranges."""
    text = "\0".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


_Named = Union[Iterable[Tuple[str, Tensor]], Dict[str, Tensor]]


class _Layout:
    """Tensors packed into one float64 buffer of key-ordered chunks (≤ CHUNK values per key)."""

    def __init__(self, named: Sequence[Tuple[str, Tensor]], tag: str):
        chunks = []
        for name, t in named:
            n = t.numel()
            for c, start in enumerate(range(0, max(n, 1), CHUNK)):
                chunks.append((_key(tag, name, c), t, start, min(n, start + CHUNK)))
        chunks.sort(key=lambda c: c[0])
        keys = [c[0] for c in chunks]
        if len(set(keys)) != len(keys):
            raise _bad(f"two tensors named alike in {[n for n, _ in named]}")
        self.keys = np.array(keys, dtype=np.uint64)
        self.lens = np.array([c[3] - c[2] for c in chunks], dtype=np.uint32)
        self.chunks = chunks
        self.size = int(self.lens.sum())

    def pack(self, out: Tensor, value: Callable[[Tensor], Optional[Tensor]]) -> None:
        """``value(t)`` of each tensor, flattened, into ``out`` (float64) in key order; zeros
        for None."""
        at = 0
        for _key_, t, start, end in self.chunks:
            v = value(t)
            if v is None:
                out[at:at + end - start].zero_()
            else:
                out[at:at + end - start].copy_(v.detach().reshape(-1)[start:end])
            at += end - start

    def unpack(self, src: Tensor, into: Callable[[Tensor], Tensor]) -> None:
        """``src`` (float64, key order) into ``into(t)`` of each tensor."""
        at = 0
        for _key_, t, start, end in self.chunks:
            dst = into(t).view(-1)[start:end]
            dst.copy_(src[at:at + end - start])
            at += end - start


def _grad(p: Tensor) -> Tensor:
    """``p``'s gradient, which ``synchronize`` made sure exists."""
    assert p.grad is not None
    return p.grad


def _named(params: _Named, what: str) -> List[Tuple[str, Tensor]]:
    items = list(params.items()) if isinstance(params, dict) else list(params)
    named = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Tensor)):
            raise _bad(f"{what}: expected (name, tensor) pairs, e.g. model.named_parameters(), "
                       f"got {type(item).__name__}")
        named.append((str(item[0]), item[1]))
    return named


def _dense_kv(kv: KVWorker) -> KVWorker:
    if not isinstance(kv, KVWorker):
        raise _bad(f"kv: expected a pslite.KVWorker, got {type(kv).__name__}")
    if kv.dtype != np.float64:
        raise _bad(f"kv: a KVWorker of {kv.dtype}: the dense part is summed in float64 "
                   "(make it with dtype=numpy.float64 on an application the servers' \"sum\" "
                   "handler serves, e.g. app_id=0)")
    return kv


#: Broadcasts made per postoffice (kept here, so that its id is not reused meanwhile).
_generation: Dict[int, Tuple[Any, int]] = {}


def broadcast_parameters(params: _Named, kv: KVWorker, root_rank: int = 0) -> None:
    """Makes every worker's ``params`` (``model.named_parameters()``, a ``state_dict()``)
    equal to worker ``root_rank``'s: the root pushes them (float64, exact for float32 and
    integers below 2^53), the workers meet at a barrier, the others pull and copy them in
    place. Every worker calls it with the same names; each call uses keys of its own, and its
    values stay on the servers (one copy of ``params`` per call). With one worker it does
    nothing.

    Raises pslite.InvalidArgumentError for a ``kv`` not float64, a ``root_rank`` that is not a
    worker's, or pairs that are not (name, tensor); pslite's errors from the requests."""
    kv = _dense_kv(kv)
    named = _named(params, "broadcast_parameters")
    po = kv.postoffice
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) \
            or not 0 <= root_rank < po.num_workers:
        raise _bad(f"root_rank={root_rank!r}: expected a worker's rank, 0 to "
                   f"{po.num_workers - 1}")
    gen = _generation.get(id(po), (po, 0))[1]
    _generation[id(po)] = (po, gen + 1)
    if po.num_workers == 1:
        return
    layout = _Layout(named, f"broadcast/{gen}")
    buf = torch.zeros(layout.size, dtype=torch.float64)
    if po.rank == root_rank:
        layout.pack(buf, lambda t: t)
        kv.wait(kv.push(layout.keys, buf, layout.lens))
    po.barrier(WORKER_GROUP)
    if po.rank != root_rank and layout.size:
        kv.pull_into(layout.keys, buf)
        with torch.no_grad():
            layout.unpack(buf, lambda t: t.data)


class DistributedOptimizer:
    """BytePS's ``DistributedOptimizer``: wraps a ``torch.optim`` optimizer so that ``step``
    first replaces each parameter's gradient by the mean over all workers.

    ``optimizer``: the local optimizer; ``named_parameters``: the (name, parameter) pairs it
    updates, all of them (names key the requests: every worker gives the same); ``kv``: a
    float64 :class:`pslite.KVWorker` on an application the servers' "sum" handler serves (app 0
    of ``pslite-server``); ``average``: divide the sum by the number of workers (default);
    ``name``: keys the requests too, so two DistributedOptimizers on one ``kv`` (a GAN's
    generator and discriminator) need two names. A learning-rate scheduler takes the wrapped
    optimizer, ``opt.optimizer``.

    How: the servers' "sum" handler adds every push into the keys' values. Step t pushes the
    gradients (float64) to the keys of parity t mod 2, waits, meets the other workers at a
    barrier, pulls the parity's running sum and subtracts the sum it pulled two steps before.
    The difference is exactly this step's sum of the workers' gradients up to float64
    rounding, and every worker computes it from the same pulled bits, so every worker applies
    the same update. Two parities let a fast worker push step t+1 before a slow one pulled
    step t. Costs one push, one barrier and one pull per step (``synchronize``); with one
    worker, nothing (its gradient is the sum).

    Construction pushes zeros (the keys exist from then on), pulls the running sums and meets
    the workers at a barrier: every worker makes its DistributedOptimizer at the same point.
    Other attributes (``param_groups``, ``state_dict``, …) are the wrapped optimizer's.

    Raises pslite.InvalidArgumentError for a ``kv`` not float64, or named parameters that are
    not the ones ``optimizer`` updates; pslite's errors from the requests.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, named_parameters: _Named,
                 kv: KVWorker, average: bool = True, name: str = "dense"):
        self._kv = _dense_kv(kv)
        named = [(n, p) for n, p in _named(named_parameters, "named_parameters")
                 if p.requires_grad]
        updated = {id(p) for g in optimizer.param_groups for p in g["params"]}
        missing = [n for n, p in named if id(p) not in updated]
        if missing:
            raise _bad(f"named_parameters: {missing} are not updated by the optimizer")
        given = {id(p) for _, p in named}
        unnamed = sum(1 for g in optimizer.param_groups for p in g["params"]
                      if p.requires_grad and id(p) not in given)
        if unnamed:
            raise _bad(f"named_parameters: {unnamed} parameter(s) the optimizer updates are not "
                       "among them: their gradients would not be averaged")
        self.optimizer = optimizer
        self._average = average
        self._orders = [_Layout(named, f"grad/{name}/{q}") for q in (0, 1)]
        n = self._orders[0].size
        self._send = torch.zeros(n, dtype=torch.float64)
        self._sum = torch.zeros(n, dtype=torch.float64)
        self._prev = [torch.zeros(n, dtype=torch.float64) for _ in (0, 1)]
        self._step = 0
        po = self._kv.postoffice
        if n and po.num_workers > 1:
            for q in (0, 1):
                # Zeros first: the "sum" handler refuses to pull a key never pushed.
                layout = self._orders[q]
                self._kv.wait(self._kv.push(layout.keys, self._send, layout.lens))
                self._kv.pull_into(layout.keys, self._prev[q])
        po.barrier(WORKER_GROUP)

    def __getattr__(self, name: str) -> Any:
        if "optimizer" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["optimizer"], name)

    def synchronize(self) -> None:
        """Replaces every parameter's ``.grad`` by the workers' mean (sum without
        ``average``); a parameter without a gradient counts as zeros and gets one."""
        q = self._step % 2
        layout = self._orders[q]
        if layout.size and self._kv.postoffice.num_workers > 1:
            layout.pack(self._send, lambda p: p.grad)
            self._kv.wait(self._kv.push(layout.keys, self._send, layout.lens))
            self._kv.postoffice.barrier(WORKER_GROUP)
            self._kv.pull_into(layout.keys, self._sum)
            delta = self._sum - self._prev[q]
            self._prev[q].copy_(self._sum)
            if self._average:
                delta /= self._kv.postoffice.num_workers
            for _key_, p, _start, _end in layout.chunks:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            layout.unpack(delta, _grad)
        self._step += 1

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """``synchronize()``, then the wrapped optimizer's step."""
        self.synchronize()
        if closure is None:
            return self.optimizer.step()
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)
