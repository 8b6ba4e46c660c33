"""Type stubs of pslite's native module (PyO3). Shapes, dtypes and errors are in each
docstring; every blocking call releases the GIL."""

from typing import (Any, Callable, Iterable, Optional, Protocol, Sequence, Tuple, Union, final,
                    type_check_only)

import numpy as np
import numpy.typing as npt

from ._tables import Table

__all__ = ["ALL_GROUP", "DTYPES", "KVWorker", "Postoffice", "ReqMeta", "SCHEDULER_GROUP",
           "SERVER_GROUP", "WORKER_GROUP", "__version__", "auc", "click_log", "run_server", "start",
           "table_spec", "unique_keys"]

__version__: str
SCHEDULER_GROUP: int  # 1
SERVER_GROUP: int  # 2
WORKER_GROUP: int  # 4
ALL_GROUP: int  # 7
DTYPES: list[str]  # ["float32", "float64", "int32", "int64", "uint8", "uint32", "uint64"]

@type_check_only
class _DLPack(Protocol):
    """A tensor read through DLPack (a PyTorch CPU tensor): the same memory, no copy."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

#: _Keys: a uint64 array (a non-negative int64 one is taken too), or a list of ints; sorted and
#: unique within a call.
_Keys = Union[npt.NDArray[np.uint64], npt.NDArray[np.int64], _DLPack, Sequence[int]]
#: _Values: a flat C-contiguous array of the worker's dtype: anything with the buffer protocol
#: (NumPy arrays), a CPU tensor through DLPack (PyTorch's, without a copy; one that requires
#: grad is read through ``detach()``), or a list. A tensor on a GPU is refused ("vals: a
#: tensor on cuda:0: pslite reads host memory only: pass vals.cpu()").
_Values = Union[npt.NDArray[Any], memoryview, _DLPack, Sequence[float]]
#: _Out: a writable C-contiguous array of the worker's dtype, or a CPU tensor (DLPack).
_Out = Union[npt.NDArray[Any], _DLPack]
#: _Values per key: uint32 array or a sequence of ints, one per key, summing to len(vals).
_Lens = Optional[Union[npt.NDArray[np.uint32], Sequence[int]]]
_DTypeLike = Union[str, type, np.dtype[Any], None]

@final
class Postoffice:
    """A node's postoffice (``pslite.start``); a context manager that finalizes on exit."""

    @property
    def rank(self) -> int:
        """This node's rank within its role, 0-based."""
    @property
    def id(self) -> int:
        """Node id: scheduler 1, servers 8, 10, …, workers 9, 11, …"""
    @property
    def role(self) -> str:
        """"scheduler", "server" or "worker"."""
    @property
    def num_servers(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def metrics_url(self) -> Optional[str]:
        """Where this node serves Prometheus metrics (PS_METRICS_PORT), or None."""
    def barrier(self, group: int = ...) -> None:
        """Waits until every node of ``group`` (default WORKER_GROUP) called barrier; Ctrl-C
        interrupts the wait (KeyboardInterrupt).

        Raises TimeoutError (PS_TIMEOUT), PeerLostError, InvalidArgumentError (group not 1–7).
        """
    def clock(self, staleness: int | None = None) -> tuple[int, float]:
        """(Worker) Bounded staleness (SSP): advances this worker's clock by one (once per
        training step, after its pushes were applied) and returns once the slowest worker is
        at most ``staleness`` clocks behind (0: in lock step; None: never waits). Returns
        ``(clock, seconds waited)``; Ctrl-C interrupts the wait, but the clock has advanced
        already: do not call it again for the same step.

        Raises TimeoutError (PS_TIMEOUT) naming the slowest worker and its clock,
        PeerLostError, InvalidArgumentError on a server.
        """
    def clocks_done(self) -> None:
        """(Worker) This worker takes no more steps: the other workers no longer wait for its
        clock. Call it after the last step; a server ignores it."""
    def resize(self, server: int, add: bool = False) -> tuple[int, int, float]:
        """Drains server rank ``server`` (its keys move to the other servers) or, with
        ``add=True``, gives it a share of the keys again, while every worker goes on pushing;
        returns ``(epoch, bytes moved, seconds)`` once every new owner holds its rows. Ctrl-C
        interrupts the wait.

        Raises InvalidArgumentError with the scheduler's refusal, TimeoutError (PS_TIMEOUT).
        """
    def finalize(self) -> None:
        """Ends the node after every node finalized (no deadline; Ctrl-C interrupts the
        wait). A second or concurrent call waits for the first and returns its result.

        Raises PeerLostError naming a lost node."""
    def __enter__(self) -> "Postoffice": ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...

def start(role: Optional[str] = None, **overrides: Any) -> Postoffice:
    """Starts this process's node and joins the cluster (blocks until every node joined).

    ``role``: "scheduler", "server" or "worker" (default: DMLC_ROLE). Settings come from the
    DMLC_*/PS_* variables; a keyword replaces one: root_uri, root_port, num_servers,
    num_workers, node_host, interface, van, verbose, timeout (seconds), rank, or any variable
    by name (PS_KEY_CACHE=1).

    RDMA_* variables are read from the environment only. Only pslite's log (stderr,
    PS_VERBOSE) is set up in the process. Ctrl-C interrupts the wait.

    Raises Error naming a missing or malformed variable (or keyword); InvalidArgumentError
    for an unknown keyword or role; TimeoutError when the cluster does not form in PS_TIMEOUT.
    """

@final
class KVWorker:
    """The worker side of a key-value application (ps-lite's KVWorker).

    A call's keys are sorted and unique; ``vals`` holds all keys' values concatenated in key
    order, ``lens[i]`` values for key i (default: ``len(vals) // len(keys)`` each). Calls
    return a timestamp to ``wait`` on.
    """

    def __new__(cls, po: Postoffice, app_id: int = 0, customer_id: int = 0,
                dtype: _DTypeLike = None) -> "KVWorker":
        """``dtype``: float32 (default), float64, int32, int64, uint8, uint32 or uint64.

        Raises InvalidArgumentError for a taken (app_id, customer_id), another dtype, or a
        postoffice that is not a worker's."""
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def postoffice(self) -> Postoffice: ...
    def push(self, keys: _Keys, vals: _Values, lens: _Lens = None, copy: bool = True) -> int:
        """Pushes ``vals`` (shape (sum(lens),)); ``vals`` may change once this returns. With
        ``copy=False`` the messages share ``vals`` without a copy (ps-lite's ZPush): it must
        not change until ``wait(ts)`` returned.

        Raises InvalidArgumentError (unsorted keys, lens not adding up, wrong dtype,
        non-contiguous array), Error (cannot send)."""
    def pull(self, keys: _Keys) -> int:
        """Pulls ``keys``; ``take_pulled(ts)`` returns the values."""
    def push_pull(self, keys: _Keys, vals: _Values, lens: _Lens = None,
                  copy: bool = True) -> int:
        """Pushes and pulls the updated values in one round trip (ZPushPull); ``copy`` as in
        ``push``."""
    def wait(self, ts: int) -> None:
        """Blocks until request ``ts`` completed.

        Raises TimeoutError naming the silent servers (PS_TIMEOUT), Error with a server's
        error text, InvalidArgumentError for a timestamp not outstanding."""
    def take_pulled(self, ts: int) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[Any],
                                            npt.NDArray[np.uint32]]:
        """Waits for pull ``ts``: (keys uint64, vals of the dtype, lens uint32 — empty when
        every key has len(vals) // len(keys) values). Raises as ``wait``."""
    def pull_into(self, keys: _Keys, out: _Out) -> None:
        """Pulls ``keys`` into ``out`` (writable, C-contiguous, the dtype, exactly the pulled
        length) and waits. Raises as ``wait``; InvalidArgumentError for a wrong size (both
        lengths named), dtype, layout or a read-only array."""
    def push_pull_into(self, keys: _Keys, vals: _Values, out: _Out,
                       lens: _Lens = None) -> None:
        """Pushes ``vals`` and pulls the updated values into ``out`` (not sharing memory
        with ``vals``), then waits. Raises as ``push`` and ``pull_into``."""

@final
class ReqMeta:
    """What a Python handler learns about a request besides its pairs."""

    cmd: int  # application command, 0 for plain push/pull
    push: bool  # the request carries values to apply
    pull: bool  # the answer must carry the keys' values
    sender: int  # the worker's node id
    timestamp: int  # the worker's timestamp

_Handler = Callable[[ReqMeta, npt.NDArray[np.uint64], npt.NDArray[Any], npt.NDArray[np.uint32]],
                   Union[None, npt.NDArray[Any], Tuple[npt.NDArray[Any], Sequence[int]]]]

def run_server(po: Postoffice, handler: Union[str, _Handler, None] = "sum",
               dtype: _DTypeLike = None, app_id: int = 0,
               tables: Optional[Iterable[Union[Table, str]]] = None) -> None:
    """Serves application ``app_id``, and the embedding tables ``tables``, until every node
    finalized, then finalizes ``po``.

    ``"sum"``: pslite's default handler, every dtype. A callable ``handler(meta, keys, vals,
    lens)`` serves ``dtype`` (default float32): ``vals`` are the pushed values (empty for a
    pull), ``lens`` uint32 (empty: an even split); for a pull it returns the keys' values, or
    ``(vals, lens)``. Its exception reaches the worker as Error ("… answered with an error:
    the Python handler raised KeyError: …"). The slow path: each request takes the GIL.

    ``tables``: ``pslite.Table`` objects or spec lines ("app=1,dim=16,opt=adagrad:lr=0.05"),
    each served as its application's float32 requests, as ``pslite-server --table`` does:
    a pull gets ``dim`` values per key (the initial row for a key the table does not hold), a
    push carries ``dim`` gradient values per key. A table on ``app_id`` takes its float32
    requests from the "sum" handler, which serves the other dtypes. Each server prints a line
    per table on stderr ("pslite: table app 0: SPEC; budget …").

    Raises InvalidArgumentError for a postoffice not a server's, a bad handler, a bad table
    spec (the text of ``pslite-server --table``: "invalid argument: bad table spec '…': dim:
    …"), two tables of one application, or a table on ``app_id`` beside a float32 callable,
    each before anything is served; for a budget too small for one row ("… budget: 100 holds
    no row …") when its table is made, the tables made before it stopped again. The node
    stays joined after any of these: call run_server again, or finalize. PeerLostError when
    a node was lost."""

def table_spec(line: str) -> str:
    """The canonical form of the table spec ``line``: every field, in the order app, dim, init,
    seed, opt, admit, budget, evict ("app=0,dim=4" gives "app=0,dim=4,init=zeros,seed=0,
    opt=sgd:lr=0.01,admit=all,evict=lru"). pslite's own parser, the one of ``pslite-server
    --table``.

    Raises InvalidArgumentError with the parser's text ("invalid argument: bad table spec
    'app=0,dim=4,opt=rmsprop': opt: unknown optimizer 'rmsprop'; allowed: sgd, adagrad, adam,
    ftrl")."""

def click_log(split: str, rows: int, shard: int = 0, shards: int = 1, seed: int = 1,
              fields: int = 26, vocab: int = 100000
              ) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Rows ``0..rows`` of ``split`` ("train" or "test") of the synthetic click log that
    ``pslite-launch … ctr`` trains on (seed, fields, vocabulary of the largest field), those
    of shard ``shard`` of ``shards`` (row i when i mod shards = shard), in order.

    Returns ``(ids, labels, truth)``: ids uint64 (n, fields), 64-bit feature ids (hashes of
    field and id, never 0, so they spread over the servers' key ranges); labels float32 (n,),
    0 or 1; truth float32 (n,), the true click probability (its AUC is the best possible).

    Raises InvalidArgumentError naming a bad split, shard or option."""

def auc(scores: _Values, labels: _Values) -> float:
    """The exact ROC AUC of ``scores`` against ``labels`` (float32, one each per sample; 1 is a
    positive), ties counting one half, as ``ctr`` reports it; 0.5 without positives or
    negatives.

    Raises InvalidArgumentError for another dtype, a non-contiguous array, or lengths that
    differ."""

def unique_keys(ids: _Keys, what: str = "keys"
                ) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """``(keys, inverse)`` of ``ids`` (uint64, or int64 ≥ 0; any C-contiguous array or CPU
    tensor, read flat): keys the distinct ids sorted as uint64 (what a request's keys must be),
    inverse int64 with ``keys[inverse[i]] == ids[i]``. A hash table and a sort of the distinct
    keys, in Rust, without the GIL (``pslite.torch``'s lookups).

    Raises InvalidArgumentError naming ``what`` as a request's keys do ("ids: a tensor of
    float32, but this call carries uint64: convert it first, e.g. ids.long()", a negative id,
    a tensor on a GPU)."""
