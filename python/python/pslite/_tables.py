"""Embedding tables on the servers, configured from Python as from the command line: a
:class:`Table` builds the spec line of ``pslite-server --table`` (pslite's own parser checks it
and gives its canonical form), and ``pslite.run_server(po, tables=[...])`` serves it.

A table holds rows of ``dim`` float32 values per uint64 key on the server that owns the key.
A worker pulls rows (``dim`` values per key; a key the table does not hold gets its initial
row, the same on every pull) and pushes gradients (``dim`` values per key), each push one step
of the table's optimizer per key. Workers use a float32 :class:`pslite.KVWorker` on the table's
``app_id``.
"""

import numbers
import operator
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Tuple, Union

from ._errors import InvalidArgumentError
from ._pslite import table_spec

__all__ = ["FTRL", "SGD", "TTL", "Adagrad", "Adam", "AdmitCount", "AdmitProbability",
           "Normal", "Table", "Uniform"]


def _bad(text: str) -> InvalidArgumentError:
    """An argument refused here, worded as pslite's own InvalidArgumentError texts are."""
    return InvalidArgumentError(f"invalid argument: {text}")


def _real(value: Any, where: str) -> str:
    """``value`` (an int or float) as a spec's number. ``where`` names the argument with its
    opening parenthesis ("SGD(lr"), so that an error reads "SGD(lr='x'): expected a number"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad(f"{where}={value!r}): expected a number")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    try:
        return repr(float(value))
    except (OverflowError, ValueError) as e:
        raise _bad(f"{where}={value!r}): not a float ({e})") from None


def _int(value: Any, where: str) -> str:
    """``value`` (an int) as a spec's whole number; ``where`` as for ``_real``."""
    if isinstance(value, bool):
        raise _bad(f"{where}={value!r}): expected an int")
    try:
        return str(operator.index(value))
    except TypeError:
        raise _bad(f"{where}={value!r}): expected an int") from None


def _text(value: str, where: str) -> str:
    """A field's value given as spec text, which cannot hold the fields' separator."""
    if "," in value:
        raise _bad(f"{where}={value!r}): a spec value cannot contain ','")
    return value.strip()


# Initial rows: computed from (seed, key) by a counter-based generator (Philox4x64-10, Salmon
# et al. 2011), so every server, restart and eviction gives a key the same initial row.


@dataclass(frozen=True)
class Uniform:
    """Initial values uniform on ``[low, high)``; needs finite ``low < high``. Spec
    ``uniform:A:B``."""

    low: float
    high: float

    @property
    def spec(self) -> str:
        """The ``init=`` value."""
        return f"uniform:{_real(self.low, 'Uniform(low')}:{_real(self.high, 'Uniform(high')}"


@dataclass(frozen=True)
class Normal:
    """Initial values normal (Box–Muller) with this mean and standard deviation (``std`` ≥ 0).
    Spec ``normal:MEAN:STD``."""

    mean: float
    std: float

    @property
    def spec(self) -> str:
        """The ``init=`` value."""
        return f"normal:{_real(self.mean, 'Normal(mean')}:{_real(self.std, 'Normal(std')}"


# Optimizers: one step per push and key, per value, with ``g`` the pushed gradient plus
# ``wd · w`` where a weight decay is set. Each keeps its slots (state) beside the row.


def _optimizer_spec(opt: Any, name: str) -> str:
    """The ``opt=`` value of optimizer ``opt``: ``name``, then each of its fields in declaration
    order as ``:field=X``, but ``wd`` only when it is not 0. A field that is not a number is
    refused naming the class and the field ("Adam(b1='x'): expected a number")."""
    cls = type(opt).__name__
    line = name
    for f in fields(opt):
        value = _real(getattr(opt, f.name), f"{cls}({f.name}")
        if f.name != "wd" or float(value) != 0.0:
            line += f":{f.name}={value}"
    return line


@dataclass(frozen=True)
class SGD:
    """``w -= lr · g`` (``lr`` > 0); ``wd`` ≥ 0: L2 weight decay. No slots. Spec
    ``sgd:lr=X[:wd=X]``."""

    lr: float
    wd: float = 0.0

    @property
    def spec(self) -> str:
        """The ``opt=`` value."""
        return _optimizer_spec(self, "sgd")


@dataclass(frozen=True)
class Adagrad:
    """AdaGrad (Duchi et al. 2011), as PyTorch's: ``acc += g²; w -= lr · g / (√acc + eps)``,
    with ``acc`` starting at ``init_acc`` (≥ 0; TensorFlow's default is 0.1, PyTorch's 0).
    ``lr`` > 0, ``eps`` ≥ 0, ``wd`` ≥ 0 (L2 weight decay). One float32 slot per value. Spec
    ``adagrad:lr=X:eps=X:init_acc=X[:wd=X]``."""

    lr: float
    eps: float = 1e-10
    init_acc: float = 0.0
    wd: float = 0.0

    @property
    def spec(self) -> str:
        """The ``opt=`` value."""
        return _optimizer_spec(self, "adagrad")


@dataclass(frozen=True)
class Adam:
    """Adam (Kingma & Ba 2015) with a step count per row, as sparse ("lazy") Adam:
    ``t += 1; m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
    w -= lr · (m / (1 − b1^t)) / (√(v / (1 − b2^t)) + eps)``. ``lr`` > 0, ``b1`` and ``b2``
    in [0, 1), ``eps`` > 0, ``wd`` ≥ 0 (L2 weight decay). Two float32 slots per value and one
    per row. Spec ``adam:lr=X:b1=X:b2=X:eps=X[:wd=X]``."""

    lr: float = 0.001
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    wd: float = 0.0

    @property
    def spec(self) -> str:
        """The ``opt=`` value."""
        return _optimizer_spec(self, "adam")


@dataclass(frozen=True)
class FTRL:
    """FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction: a View from the Trenches",
    Algorithm 1), per value: ``σ = (√(n + g²) − √n) / alpha; z += g − σ·w; n += g²;
    w = 0 if |z| ≤ l1, else −(z − sgn(z)·l1) / ((beta + √n) / alpha + l2)``. ``alpha`` > 0;
    ``beta``, ``l1``, ``l2`` ≥ 0; no weight decay (``l2`` is it). Two float32 slots per value;
    a row's initial values last until its first push. Spec ``ftrl:alpha=X:beta=X:l1=X:l2=X``."""

    alpha: float = 0.05
    beta: float = 1.0
    l1: float = 0.0
    l2: float = 0.0

    @property
    def spec(self) -> str:
        """The ``opt=`` value."""
        return _optimizer_spec(self, "ftrl")


# Admission: when a key not held gets a row. Until then its pulls get the initial row and its
# pushes are counted and dropped.


@dataclass(frozen=True)
class AdmitCount:
    """A key gets a row at its ``n``-th push (1 to 255), counted by a count-min sketch
    (Cormode & Muthukrishnan 2005, with conservative update; Monolith's occurrence threshold)
    of 4 rows of ``width`` 8-bit counters (a power of two from 64 to 2^32; default 2^20, 4 MiB
    per table and server). A sketch can only overcount: a key may be admitted early, never
    late. Spec ``count:N[:width=W]``."""

    n: int
    width: Optional[int] = None

    @property
    def spec(self) -> str:
        """The ``admit=`` value."""
        line = f"count:{_int(self.n, 'AdmitCount(n')}"
        if self.width is None:
            return line
        return f"{line}:width={_int(self.width, 'AdmitCount(width')}"


@dataclass(frozen=True)
class AdmitProbability:
    """Each push of a key not held admits it with probability ``p`` (0 < p ≤ 1; Persia's
    admit probability), drawn from a hash of (seed, key, the table's push count), so a replay
    of the same pushes admits the same keys. Spec ``prob:P``."""

    p: float

    @property
    def spec(self) -> str:
        """The ``admit=`` value."""
        return f"prob:{_real(self.p, 'AdmitProbability(p')}"


@dataclass(frozen=True)
class TTL:
    """Eviction of rows not pushed in the last ``pushes`` pushes of the table (requests, not
    keys; ≥ 1), checked every ``pushes / 8`` pushes; least recently pushed rows go too when
    the budget is full. Spec ``ttl:T``."""

    pushes: int

    @property
    def spec(self) -> str:
        """The ``evict=`` value."""
        return f"ttl:{_int(self.pushes, 'TTL(pushes')}"


_Init = Union[str, Tuple[Any, ...], Uniform, Normal]
_Optimizer = Union[SGD, Adagrad, Adam, FTRL, str]
_Admit = Union[None, str, AdmitCount, AdmitProbability]
_Evict = Union[str, TTL]


def _init_of(init: Any) -> Union[str, Uniform, Normal]:
    if isinstance(init, (str, Uniform, Normal)):
        return init
    if isinstance(init, tuple) and len(init) == 3 and init[0] in ("uniform", "normal"):
        return Uniform(init[1], init[2]) if init[0] == "uniform" else Normal(init[1], init[2])
    raise _bad(f"Table(init={init!r}): expected \"zeros\", (\"uniform\", A, B), "
               "(\"normal\", MEAN, STD), pslite.Uniform(A, B) or pslite.Normal(MEAN, STD)")


def _value(part: Any, kinds: Tuple[type, ...], where: str, expected: str) -> str:
    """The spec value of a Table argument: a part object's ``spec`` or spec text."""
    if isinstance(part, str):
        return _text(part, where)
    if isinstance(part, kinds):
        return str(getattr(part, "spec"))
    raise _bad(f"{where}={part!r}): expected {expected}")


@dataclass(frozen=True, eq=False)
class Table:
    """An embedding table, served by ``pslite.run_server(po, tables=[table])`` on every server
    (each holds the rows of its own keys) as application ``app``'s float32 requests.

    - ``app``: the application id (``KVWorker(po, app_id=app)``), an int32.
    - ``dim``: float32 values per row, 1 to 2^20; pulls and pushes carry ``dim`` values per
      key (``lens`` empty or all ``dim``).
    - ``init``: initial rows, a pure function of (seed, key): ``"zeros"``,
      ``("uniform", a, b)`` or ``pslite.Uniform(a, b)``, ``("normal", mean, std)`` or
      ``pslite.Normal(mean, std)``.
    - ``optimizer``: ``pslite.SGD``, ``pslite.Adagrad``, ``pslite.Adam`` or ``pslite.FTRL``;
      each push applies one step per key.
    - ``seed``: the initializer's (and probability admission's) seed, a uint64; default
      ``app``.
    - ``admit``: ``None`` or ``"all"`` (a row at a key's first push), ``pslite.AdmitCount(n)``,
      ``pslite.AdmitProbability(p)``.
    - ``budget``: bytes this table may hold on each server (rows, optimizer slots, index,
      sketch): an int, or a string such as ``"512MiB"`` (``KiB``, ``MiB``, ``GiB``, ``TiB``;
      ``KB``, ``MB``, ``GB``, ``TB`` are powers of 10); ``None``: no limit.
    - ``evict``: which rows go when the budget is full: ``"lru"`` (least recently pushed) or
      ``pslite.TTL(pushes)``.

    Each part may also be given as its spec text (``optimizer="adagrad:lr=0.05"``).
    ``str(table)`` and ``table.spec`` are the canonical spec line, as ``pslite-server
    --table`` takes and prints it; two tables are equal when their lines are.

    Raises ``InvalidArgumentError`` at construction for anything pslite's spec parser refuses,
    with its text ("invalid argument: bad table spec 'app=0,dim=0': dim: '0': allowed: 1 to
    1048576"), or for an argument of the wrong type. Made before ``pslite.start``, a bad table
    fails before the server joins the cluster. A budget too small for one row is found when a
    server makes the table (``run_server``).
    """

    app: int
    dim: int
    init: _Init = "zeros"
    optimizer: _Optimizer = SGD(lr=0.01)
    seed: Optional[int] = None
    admit: _Admit = None
    budget: Union[int, str, None] = None
    evict: _Evict = "lru"
    spec: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "init", _init_of(self.init))
        object.__setattr__(self, "spec", table_spec(self._line()))

    def _line(self) -> str:
        """The spec line of the arguments given (the fields left at their defaults omitted)."""
        parts = [f"app={_int(self.app, 'Table(app')}", f"dim={_int(self.dim, 'Table(dim')}"]
        if self.init != "zeros":
            parts.append("init=" + _value(self.init, (Uniform, Normal), "Table(init",
                                          "\"zeros\", pslite.Uniform or pslite.Normal"))
        if self.seed is not None:
            parts.append(f"seed={_int(self.seed, 'Table(seed')}")
        if self.optimizer != SGD(lr=0.01):
            parts.append("opt=" + _value(self.optimizer, (SGD, Adagrad, Adam, FTRL),
                                         "Table(optimizer", "pslite.SGD, pslite.Adagrad, "
                                         "pslite.Adam, pslite.FTRL or an opt= spec"))
        if self.admit is not None:
            parts.append("admit=" + _value(self.admit, (AdmitCount, AdmitProbability),
                                           "Table(admit", "None, \"all\", pslite.AdmitCount "
                                           "or pslite.AdmitProbability"))
        if self.budget is not None:
            budget = (_text(self.budget, "Table(budget") if isinstance(self.budget, str)
                      else _int(self.budget, "Table(budget"))
            parts.append(f"budget={budget}")
        if self.evict != "lru":
            parts.append("evict=" + _value(self.evict, (TTL,), "Table(evict",
                                           "\"lru\" or pslite.TTL(pushes)"))
        return ",".join(parts)

    def __str__(self) -> str:
        return self.spec

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Table):
            return NotImplemented
        return self.spec == other.spec

    def __hash__(self) -> int:
        return hash(self.spec)
