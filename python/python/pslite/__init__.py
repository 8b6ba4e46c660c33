"""pslite: Python workers and servers for pslite-rs, a parameter server in the style of ps-lite.

A job has one scheduler, S servers and W workers. Each process calls :func:`start`, which
reads its role and settings from the ``DMLC_*``/``PS_*`` variables (what ``pslite-launch``
sets), and joins the cluster. Workers push and pull through a :class:`KVWorker`; servers run
:func:`run_server` with pslite's default handler, a Python callable, or embedding tables
(:class:`Table`: rows per key, initialized lazily and updated by an optimizer on the servers).
:mod:`pslite.torch` (the ``torch`` extra) puts those tables behind ``nn.Module``s and sums dense
gradients through the servers; :func:`click_log` and :func:`auc` give Python models the
synthetic click log and the measure of ``pslite-launch … ctr``.
The core is Rust (bound with PyO3): the GIL is released during every wait, send and server
loop, so other Python threads run meanwhile.

Example (a worker; run it under ``pslite-launch local --worker-cmd 'python train.py'``)::

    import numpy as np, pslite

    with pslite.start() as po:                     # role and cluster from DMLC_* variables
        kv = pslite.KVWorker(po, dtype=np.float32)
        keys = np.array([1, 7], dtype=np.uint64)    # sorted, unique
        kv.wait(kv.push(keys, np.ones(4, np.float32)))  # 2 values per key, summed by servers
        po.barrier()                                # every worker pushed
        out = np.empty(4, np.float32)
        kv.pull_into(keys, out)                     # == po.num_workers everywhere
"""

from ._errors import Error, InvalidArgumentError, PeerLostError, TimeoutError
from ._pslite import (
    ALL_GROUP,
    DTYPES,
    SCHEDULER_GROUP,
    SERVER_GROUP,
    WORKER_GROUP,
    KVWorker,
    Postoffice,
    ReqMeta,
    __version__,
    auc,
    click_log,
    run_server,
    start,
)
from ._tables import (
    FTRL,
    SGD,
    TTL,
    Adagrad,
    Adam,
    AdmitCount,
    AdmitProbability,
    Normal,
    Table,
    Uniform,
)

__all__ = [
    "ALL_GROUP",
    "DTYPES",
    "SCHEDULER_GROUP",
    "SERVER_GROUP",
    "WORKER_GROUP",
    "FTRL",
    "SGD",
    "TTL",
    "Adagrad",
    "Adam",
    "AdmitCount",
    "AdmitProbability",
    "Error",
    "InvalidArgumentError",
    "KVWorker",
    "Normal",
    "PeerLostError",
    "Postoffice",
    "ReqMeta",
    "Table",
    "TimeoutError",
    "Uniform",
    "__version__",
    "auc",
    "click_log",
    "run_server",
    "start",
]
