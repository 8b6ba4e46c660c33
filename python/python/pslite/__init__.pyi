from ._errors import Error as Error
from ._errors import InvalidArgumentError as InvalidArgumentError
from ._errors import PeerLostError as PeerLostError
from ._errors import TimeoutError as TimeoutError
from ._pslite import ALL_GROUP as ALL_GROUP
from ._pslite import DTYPES as DTYPES
from ._pslite import SCHEDULER_GROUP as SCHEDULER_GROUP
from ._pslite import SERVER_GROUP as SERVER_GROUP
from ._pslite import WORKER_GROUP as WORKER_GROUP
from ._pslite import KVWorker as KVWorker
from ._pslite import Postoffice as Postoffice
from ._pslite import ReqMeta as ReqMeta
from ._pslite import __version__ as __version__
from ._pslite import auc as auc
from ._pslite import click_log as click_log
from ._pslite import run_server as run_server
from ._pslite import start as start
from ._tables import FTRL as FTRL
from ._tables import SGD as SGD
from ._tables import TTL as TTL
from ._tables import Adagrad as Adagrad
from ._tables import Adam as Adam
from ._tables import AdmitCount as AdmitCount
from ._tables import AdmitProbability as AdmitProbability
from ._tables import Normal as Normal
from ._tables import Table as Table
from ._tables import Uniform as Uniform

__all__ = ["ALL_GROUP", "DTYPES", "SCHEDULER_GROUP", "SERVER_GROUP", "WORKER_GROUP",
           "FTRL", "SGD", "TTL", "Adagrad", "Adam", "AdmitCount", "AdmitProbability",
           "Error", "InvalidArgumentError", "KVWorker", "Normal", "PeerLostError",
           "Postoffice", "ReqMeta", "Table", "TimeoutError", "Uniform", "__version__",
           "auc", "click_log", "run_server", "start"]
