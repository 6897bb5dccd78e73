"""Known faults as data: version-gated rules the guard loads, and the database it ships.

A :class:`KnownFault` says, for one op on one backend: which calls go wrong (dtype,
layout and a size predicate over the call's metadata), on which torch / CUDA / driver
versions (a version gate), what happens (``wrong``, ``error``, ``crash``), what the
guard does about it (``fix``: split along ``split_dim``; ``raise``) and where the fact
comes from (``provenance``: a study's records, a sweep's run store, a date).

Rules are JSON (one file holds ``{"schema": 1, "rules": [...]}``). The guard loads the
database shipped in ``kernelaudit/guard/known_faults/`` (:func:`known_faults`), plus any
user rule files (``install(rules=...)``, ``kernelaudit run --rules FILE``,
``$KERNELAUDIT_GUARD_RULES``), keeps the rules whose device this process has and whose
versions match (:func:`active`), and turns them into a
:class:`~kernelaudit.guard.policy.Policy` (:func:`rules_policy`). When no rule is
active, nothing is hooked.

Predicates (``when``), all over metadata only (shapes, strides, offsets; no data):

* ``{"kind": "mps-matmul", "rule": "A"|"B"|"C"}``: rule A, B or C of BACKGROUND §1,
  through :func:`kernelaudit.faults.predicates.mps_matmul_decision`;
* ``{"kind": "mps-attention"}``: attention scores over 2^32 elements;
* ``{"kind": "numel", "tensor": T, "at_least": N, "extent": false}``: some tensor of
  kind ``T`` (``any``, ``output``, ``operand``, ``view-operand``,
  ``contig-operand``) has at least ``N`` elements (with ``extent``: storage offset +
  elements, the highest flat index the kernel addresses + 1);
* ``{"kind": "attention-scores", "at_least": N, "query_arg": i, "key_arg": j}``:
  ``prod(query.shape[:-1]) * key.shape[-2] >= N`` (tensor arguments ``i``, ``j``);
* ``{"kind": "dim", "dim": d, "at_least": N, "ndim": R}``: some tensor of the call (its
  tensor arguments; a matmul-family op's operands), of ``R`` dims where ``ndim`` is given,
  has at least ``N`` along dim ``d`` (a grid dimension's limit: flash attention at batch or
  heads 65536; reflect padding's planes, dim 1 of a 3-d input only);
* ``{"kind": "bytes", "at_least": N}``: some tensor's storage reaches byte ``N - 1``
  (storage offset plus extent, times the element size: 32-bit byte offsets).

* ``{"kind": "norm-rows", "at_least": R, "below_normalized": N}``: a normalization's
  backward (an entry point with a ``normalized_shape`` argument) over two or more
  normalized dims of fewer than ``N`` elements in all, with at least ``R`` rows (the
  first tensor's elements over the normalized ones): CUDA's two-pass gamma backward,
  which sizes its scratch by the last normalized dim (:func:`norm_rows`). Its ``fix``
  needs no ``split_dim``: the guard runs the call with the normalized dims flattened
  into one (:func:`kernelaudit.guard.separable.fix_flatten_normalized`).
* ``{"kind": "rows", "at_least": R}``: a normalization (an entry point with a
  ``normalized_shape`` argument) over at least ``R`` rows, however many dims hold them
  (CUDA's layer norm launches a block a row and refuses more rows than its grid holds).
* ``{"kind": "leading", "of": ARG, "at_least": N}``: the first tensor argument's dims
  before the dim that argument ``ARG`` names hold at least ``N`` elements together (a
  kernel that launches one grid row per leading index: ``_chunk_cat``'s grid z, at most
  65,535).

Any predicate of a screened entry point (``aten``) may add ``"inner_of": ARG``: the rule
then matches only calls whose first tensor argument has more than one element past the
dim that argument ``ARG`` names (softmax's spatial kernel, which runs over a non-last
dim: :data:`INNER_OF`).

``N`` is an integer or a named threshold (``"2^31"``, ``"2^32"``, ``"2*2^32"``, with an
optional ``"+1"``), resolved at the thresholds the policy is built at (real: 2^32).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import InvalidArgument, check_choice
from ..thresholds import REAL, Thresholds

SCHEMA = 1
#: Backends a rule may name (``any``: every device, what-if runs under a fault model).
DEVICES = ("mps", "cuda", "cpu", "xpu", "any")
#: What the fault does to a call: a wrong answer, a raise, the process's end, or a call
#: that does not return (``hang``: a timeout far past the time of the size just below).
EFFECTS = ("wrong", "error", "crash", "hang")
RULE_ACTIONS = ("fix", "raise")
LAYOUTS = ("contig", "aT", "bT", "abT", "slice", "expand")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64")
PREDICATES = ("mps-matmul", "mps-attention", "numel", "attention-scores", "dim", "bytes", "norm-rows", "rows",
              "leading")
TENSOR_KINDS = ("any", "output", "operand", "view-operand", "contig-operand")
VERSION_KEYS = ("torch", "cuda", "driver")
#: The guard's engine fixes these ops itself (split into safe pieces); any other op a
#: rule names is screened at its aten entry point (``aten``): fixed by
#: :mod:`.separable` when the rule says ``fix`` (a factory, or a ``split_dim``), else refused.
ENGINE_OPS = ("matmul", "mm", "bmm", "addmm", "baddbmm", "sdpa_mps")
#: Screened factory ops the guard fixes by computing their output in pieces of offset
#: starts (no ``split_dim`` needed; :mod:`.separable`).
FACTORIES = ("arange", "linspace", "logspace")
#: Aten ops the guard fixes in a way of their own rather than by a split along one dim
#: (the fixes: :data:`kernelaudit.guard.separable.OWN_FIX`): draws in pieces of draws,
#: pieces merged at their cuts, softmax's backward moved off its spatial kernel, batched
#: matrices in pieces of the batch, a tall matrix's SVD through a QR of row pieces, a layer
#: norm and its backward in pieces of their rows, a tall matrix's pinv with a backward that
#: forms no m x m product.
OWN_FIXES = frozenset({"multinomial", "unique_consecutive", "_softmax_backward_data", "_log_softmax_backward_data",
                       "linalg_matrix_exp", "_linalg_svd", "native_layer_norm", "native_layer_norm_backward",
                       "linalg_pinv"})


def own_fixed(aten: Sequence[str]) -> bool:
    """Whether every entry point of ``aten`` has a fix of its own (:data:`OWN_FIXES`)."""
    return bool(aten) and all(a.partition(".")[0] in OWN_FIXES for a in aten)


_FIELDS = ("name", "op", "device", "effect", "when", "dtypes", "layouts", "versions", "action", "split_dim",
           "aten", "explain", "provenance")


@dataclass(frozen=True)
class KnownFault:
    """One known fault of one op on one backend, and what the guard does about it."""

    name: str
    op: str
    device: str
    effect: str
    when: dict
    dtypes: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ()
    versions: dict = field(default_factory=dict)
    action: str = "fix"
    split_dim: int | None = None
    aten: tuple[str, ...] = ()
    explain: str = ""
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        object.__setattr__(self, "layouts", tuple(self.layouts))
        object.__setattr__(self, "aten", tuple(self.aten))
        where = f"rule {self.name!r}"
        if not self.name or not isinstance(self.name, str):
            raise InvalidArgument(f"Cannot have a rule with name={self.name!r}: a non-empty string is required")
        check_choice(f"{where} device", self.device, DEVICES)
        check_choice(f"{where} effect", self.effect, EFFECTS)
        check_choice(f"{where} action", self.action, RULE_ACTIONS)
        for d in self.dtypes:
            check_choice(f"{where} dtypes", d, DTYPES)
        for lay in self.layouts:
            check_choice(f"{where} layouts", lay, LAYOUTS)
        for k, spec in self.versions.items():
            check_choice(f"{where} versions key", k, VERSION_KEYS)
            _specifier(spec, f"{where} versions.{k}")
        if self.split_dim is not None and (not isinstance(self.split_dim, int) or self.split_dim < 0):
            raise InvalidArgument(f"Cannot have {where} split_dim={self.split_dim!r}: allowed values are null or "
                                  "an integer >= 0")
        if self.op not in ENGINE_OPS and not self.aten:
            raise InvalidArgument(f"Cannot have {where} op={self.op!r} without aten entry points: name the aten "
                                  f"op(s) to screen in 'aten', or use one of {', '.join(ENGINE_OPS)}")
        if self.op not in ENGINE_OPS and self.action == "fix" and self.split_dim is None and \
                self.op not in FACTORIES and not self.flattens and not own_fixed(self.aten):
            raise InvalidArgument(f"Cannot have {where} action='fix' on op={self.op!r} without split_dim: the "
                                  f"guard splits a screened op along split_dim (factories {', '.join(FACTORIES)} "
                                  f"and entries with fixes of their own, {', '.join(sorted(OWN_FIXES))}, need none); "
                                  "give split_dim or action='raise'")
        _check_predicate(self.when, where)

    @property
    def flattens(self) -> bool:
        """Whether its calls are fixed by flattening the normalized dims into one (a
        ``norm-rows`` rule: :func:`~kernelaudit.guard.separable.fix_flatten_normalized`),
        not by a split."""
        return isinstance(self.when, dict) and self.when.get("kind") == "norm-rows"

    @property
    def engine(self) -> bool:
        """Whether the guard's engine handles the op (fix by splitting), else a screen (raise)."""
        return self.op in ENGINE_OPS

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("dtypes", "layouts", "aten"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_json(cls, d: dict, where: str = "rule") -> "KnownFault":
        if not isinstance(d, dict):
            raise InvalidArgument(f"Cannot read {where}: a JSON object is required, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise InvalidArgument(f"Cannot have {where} field(s) {unknown}: allowed fields are {', '.join(_FIELDS)}")
        for req in ("name", "op", "device", "effect", "when"):
            if req not in d:
                raise InvalidArgument(f"Cannot read {where}: field {req!r} is required")
        return cls(**d)

    def matches_versions(self, env: "RuntimeEnv") -> bool:
        """Whether the running versions fall inside every gate (a gate on a version this
        process does not have, e.g. CUDA on a CPU build, does not match)."""
        for k, spec in self.versions.items():
            have = env.version(k)
            if have is None or not _specifier(spec, k).contains(have, prereleases=True):
                return False
        return True

    def describe(self) -> str:
        gates = ", ".join(f"{k} {v}" for k, v in self.versions.items()) or "every version"
        return f"{self.name}: {self.op} on {self.device} ({gates}): {self.effect}, action {self.action}"


# -- validation helpers ------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _specifier(spec: str, where: str):
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec)
    except (InvalidSpecifier, TypeError) as e:
        raise InvalidArgument(f"Cannot have {where}={spec!r}: allowed values are PEP 440 version ranges "
                              f"such as '>=2.10' or '>=2.5,<2.11' ({e})") from None


_THRESHOLD = re.compile(r"^(2\^31|2\^32|2\*2\^32)(\+1)?$")


def resolve_threshold(value, th: Thresholds, where: str = "at_least") -> int:
    """An element count from an integer or a named threshold (``"2^32"``, ``"2^32+1"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgument(f"Cannot have {where}={value!r}: allowed values are an integer >= 1 or "
                              "'2^31', '2^32', '2*2^32' (optionally with '+1')")
    if isinstance(value, int):
        if value < 1:
            raise InvalidArgument(f"Cannot have {where}={value}: allowed values are integers >= 1")
        return value
    m = _THRESHOLD.match(value)
    if not m:
        raise InvalidArgument(f"Cannot have {where}={value!r}: allowed values are an integer >= 1 or "
                              "'2^31', '2^32', '2*2^32' (optionally with '+1')")
    return th.named()[m.group(1)] + (1 if m.group(2) else 0)


def _check_predicate(when: dict, where: str) -> None:
    if not isinstance(when, dict) or "kind" not in when:
        raise InvalidArgument(f"Cannot have {where} when={when!r}: an object with 'kind' "
                              f"({', '.join(PREDICATES)}) is required")
    kind = when["kind"]
    check_choice(f"{where} when.kind", kind, PREDICATES)
    if kind == "mps-matmul":
        check_choice(f"{where} when.rule", when.get("rule"), ("A", "B", "C"))
    if kind == "numel":
        check_choice(f"{where} when.tensor", when.get("tensor", "any"), TENSOR_KINDS)
    if kind in ("numel", "attention-scores", "dim", "bytes", "norm-rows", "rows", "leading"):
        resolve_threshold(when.get("at_least"), REAL, f"{where} when.at_least")
    if kind == "leading" and not (isinstance(when.get("of"), str) and when["of"]):
        raise InvalidArgument(f"Cannot have {where} when.of={when.get('of')!r}: the name of the call's dim "
                              "argument is required")
    if kind == "dim" and not (isinstance(when.get("dim"), int) and when["dim"] >= 0):
        raise InvalidArgument(f"Cannot have {where} when.dim={when.get('dim')!r}: an integer >= 0 is required")
    if kind == "dim" and "ndim" in when and not (isinstance(when["ndim"], int) and not isinstance(when["ndim"], bool)
                                                 and when["ndim"] > when["dim"]):
        raise InvalidArgument(f"Cannot have {where} when.ndim={when['ndim']!r}: an integer above when.dim "
                              f"({when['dim']}) is required (the rank of the tensors the rule reads)")
    if kind == "norm-rows" and not (isinstance(when.get("below_normalized"), int)
                                    and not isinstance(when.get("below_normalized"), bool)
                                    and when["below_normalized"] >= 2):
        raise InvalidArgument(f"Cannot have {where} when.below_normalized={when.get('below_normalized')!r}: an "
                              "integer >= 2 (the normalized elements the faulty path stays below) is required")
    if "inner_of" in when and not (isinstance(when["inner_of"], str) and when["inner_of"]):
        raise InvalidArgument(f"Cannot have {where} when.inner_of={when['inner_of']!r}: the name of the call's "
                              "dim argument is required")


#: Screened entry points whose fault is in one of their kernels only, and the argument
#: that picks it: softmax's backward runs its spatial kernel (32-bit offsets,
#: pytorch/pytorch PR #188031) where the softmax dim is not the last one (more than one
#: element past it); over the last dim another kernel runs, right past 2^32 (the full
#: grid's ``softmax`` and ``log_softmax`` backward cases). The sweep's rules add
#: ``"inner_of"`` for them.
INNER_OF = {"_softmax_backward_data": "dim", "_log_softmax_backward_data": "dim"}


def norm_rows(tensors: Sequence, args) -> tuple[int, int, int] | None:
    """(rows, normalized elements, normalized dims) of a normalization call (``args``:
    its arguments by name, with ``normalized_shape``; rows: the first tensor's elements
    over the normalized ones), or None where it has no such argument."""
    shape = args.get("normalized_shape")
    if not tensors or not isinstance(shape, (list, tuple)) or not shape:
        return None
    n = math.prod(int(x) for x in shape)
    return (tensors[0].numel() // n if n else 0), n, len(shape)


def _around(tensors: Sequence, args, name: str) -> tuple[int, int] | None:
    """(elements before, elements past) the dim of ``tensors[0]`` that argument ``name``
    of the call (``args``: name -> value) names; None where the call says no such thing."""
    d = args.get(name)
    if not tensors or not isinstance(d, int) or not tensors[0].dim():
        return None
    shape = tensors[0].shape
    d %= len(shape)
    return math.prod(shape[:d]), math.prod(shape[d + 1:])


def leading_extent(tensors: Sequence, args, name: str) -> int | None:
    """The elements of ``tensors[0]`` before the dim that argument ``name`` names."""
    got = _around(tensors, args, name)
    return None if got is None else got[0]


def inner_extent(tensors: Sequence, args, name: str) -> int | None:
    """The elements of ``tensors[0]`` past the dim that argument ``name`` names."""
    got = _around(tensors, args, name)
    return None if got is None else got[1]


# -- the running process ------------------------------------------------------------------
@dataclass(frozen=True)
class RuntimeEnv:
    """The versions and devices a rule's gate is matched against. ``driver`` is read
    only when a rule gates on it (``nvidia-smi``, once per process)."""

    torch: str
    cuda: str | None
    devices: tuple[str, ...]
    driver: str | None = None

    @classmethod
    def current(cls) -> "RuntimeEnv":
        import torch

        devices = ["cpu"]
        if torch.cuda.is_available():
            devices.append("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            devices.append("mps")
        return cls(torch.__version__, torch.version.cuda, tuple(devices))

    def version(self, key: str) -> str | None:
        if key == "torch":
            return _public(self.torch)
        if key == "cuda":
            return self.cuda
        if self.driver is not None:
            return self.driver
        return _driver_version() if "cuda" in self.devices else None


def _public(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0`` (local labels never decide a gate)."""
    return version.split("+", 1)[0]


@functools.lru_cache(maxsize=1)
def _driver_version() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


# -- loading --------------------------------------------------------------------------------
def parse_rules(doc: dict, where: str = "rules") -> list[KnownFault]:
    """Rules of a ``{"schema": 1, "rules": [...]}`` document."""
    if not isinstance(doc, dict) or "rules" not in doc:
        raise InvalidArgument(f"Cannot read {where}: a JSON object with a 'rules' list is required")
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise InvalidArgument(f"Cannot read {where}: schema={doc.get('schema')!r}, allowed values are {SCHEMA}")
    rules = [KnownFault.from_json(r, f"{where} rules[{i}]") for i, r in enumerate(doc["rules"])]
    names = [r.name for r in rules]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidArgument(f"Cannot have duplicate rule names {dup} in {where}")
    return rules


def load_rules(path: str | Path) -> list[KnownFault]:
    """The rules of one JSON rule file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise InvalidArgument(f"Cannot read rules file {str(p)!r}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"Cannot read rules file {str(p)!r}: {e}") from None
    return parse_rules(doc, str(p))


def dump_rules(rules: Iterable[KnownFault], path: str | Path, **meta) -> Path:
    """Write ``rules`` as a rule file (``meta``: extra top-level fields, e.g. ``source``)."""
    p = Path(path)
    doc = {"schema": SCHEMA, **meta, "rules": [r.to_json() for r in rules]}
    p.write_text(json.dumps(doc, indent=2) + "\n")
    return p


#: The shipped database's files (package data under ``known_faults/``).
DATABASE_FILES = ("mps_study.json", "sweeps_of_record.json", "quick_sweep_opinfo.json", "sdpa_heads.json",
                  "sdpa_heads_float32.json", "full_grid_pools_factories.json", "full_grid_softmax_backward.json",
                  "full_grid_2_31.json", "norm_backward_rows.json", "random_draws.json", "tall_svd.json",
                  "full_grid_batched_lu_chunk_cat.json", "batched_lu_solve.json", "full_grid_float32.json",
                  "batched_eigh_layer_norm_rows.json", "multilabel_margin_loss_backward.json",
                  "chunk_cat_grid_z.json", "full_grid_reflect_pad_rows.json", "cublas_int_dims.json",
                  "reflect_pad_planes.json", "pinv_backward_tall.json", "batched_svd.json", "mode_2_31.json",
                  "scan_with_indices_2_31.json")


@functools.lru_cache(maxsize=1)
def _database() -> tuple[KnownFault, ...]:
    folder = resources.files("kernelaudit.guard") / "known_faults"
    out: list[KnownFault] = []
    for name in DATABASE_FILES:
        doc = json.loads((folder / name).read_text())
        out.extend(parse_rules(doc, f"known_faults/{name}"))
    return tuple(out)


def known_faults() -> list[KnownFault]:
    """Every rule of the database shipped with kernelaudit."""
    return list(_database())


def user_rule_paths() -> list[str]:
    """The rule files named by ``$KERNELAUDIT_GUARD_RULES`` (``os.pathsep``-separated)."""
    import os

    from ..config import GUARD_RULES

    return [p for p in GUARD_RULES.raw().split(os.pathsep) if p.strip()]


def gather(rules=None) -> list[KnownFault]:
    """The rules ``install(rules=...)`` means: ``None`` is the shipped database plus the
    files of ``$KERNELAUDIT_GUARD_RULES``; a path (or a list of paths and rules) adds
    those to the database; ``"only:PATH"`` style is not offered: pass a list of
    :class:`KnownFault` to use exactly those."""
    if rules is None:
        out = known_faults()
        for p in user_rule_paths():
            out.extend(load_rules(p))
        return out
    if isinstance(rules, (str, Path)):
        rules = [rules]
    out = []
    explicit = all(isinstance(r, KnownFault) for r in rules)
    if not explicit:
        out.extend(known_faults())
    for r in rules:
        out.extend([r] if isinstance(r, KnownFault) else load_rules(r))
    return out


def active(rules: Sequence[KnownFault], env: RuntimeEnv | None = None, *, what_if: bool = False) -> list[KnownFault]:
    """The rules that apply to this process: device present (``any`` only in a what-if
    run) and every version gate matched."""
    env = env or RuntimeEnv.current()
    out = []
    for r in rules:
        if r.device == "any":
            if not what_if:
                continue
        elif r.device not in env.devices and not what_if:
            continue
        if r.matches_versions(env):
            out.append(r)
    return out


# -- rules -> the guard's policy -------------------------------------------------------------------
def call_layout(call) -> str:
    """The sweep's layout name of a matmul-family call (``contig``, ``aT``, ``bT``, ``abT``,
    ``slice``, ``expand``), from its operands' metadata."""
    a, b = call.operands[0], call.operands[1]
    ta, tb = a.transposed, b.transposed
    if ta and tb:
        return "abT"
    if ta:
        return "aT"
    if tb:
        return "bT"
    if a.offset or b.offset:
        return "slice"
    if any(st == 0 and n > 1 for n, st in zip(b.shape, b.strides)):
        return "expand"
    return "contig"


def _tensor_sizes(call, kind: str, extent: bool) -> list[int]:
    def size(m) -> int:
        n = m.numel
        return n + m.offset if extent else n

    if kind == "output":
        return [call.out_numel]
    ops = call.operands
    if kind == "operand":
        return [size(m) for m in ops]
    if kind == "view-operand":
        return [size(m) for m in ops if m.view]
    if kind == "contig-operand":
        return [size(m) for m in ops if not m.view]
    return [size(m) for m in ops] + [call.out_numel]


def _numel_check(when: dict, th: Thresholds):
    n = resolve_threshold(when["at_least"], th)
    kind = when.get("tensor", "any")
    extent = bool(when.get("extent", False))

    def check(call):
        sizes = _tensor_sizes(call, kind, extent)
        big = max(sizes) if sizes else 0
        if big >= n:
            what = "storage extent" if extent else "elements"
            return f"a{'' if kind == 'any' else ' ' + kind} tensor has {big} >= {n} {what}"
        return None
    # the engine's fast path: every tensor below this floor means the rule cannot fire
    # (an extent counts the storage offset too, which the floor does not see)
    return check, (0 if extent else n)


def _scores_check(when: dict, th: Thresholds):
    n = resolve_threshold(when["at_least"], th)

    def check(call):
        scores = call.scores_numel
        if scores is None:
            q, k = call.operands[0], call.operands[1]
            scores = math.prod(q.shape[:-1]) * k.shape[-2]
        return f"attention scores have {scores} >= {n} elements" if scores >= n else None
    return check, n


def _longest_along(shapes, d: int, rank: int | None) -> int:
    """The largest size along dim ``d`` of ``shapes`` (of ``rank`` dims only, when given)."""
    return max((s[d] for s in shapes if len(s) > d and rank in (None, len(s))), default=0)


def _dim_check(when: dict, th: Thresholds):
    n, d, rank = resolve_threshold(when["at_least"], th), when["dim"], when.get("ndim")

    def check(call):
        big = _longest_along((m.shape for m in call.operands), d, rank)
        return f"a tensor has {big} >= {n} along dim {d}" if big >= n else None
    return check, n  # a tensor that long along one dim has at least n elements


def _bytes_check(when: dict, th: Thresholds):
    n = resolve_threshold(when["at_least"], th)

    def check(call):
        size = call.dtype.itemsize
        big = max((_extent(m.shape, m.strides, m.offset) * size for m in call.operands), default=0)
        return f"a tensor's storage reaches {big} >= {n} bytes" if big >= n else None
    return check, 0  # a view's storage may reach far past its element count


def _extent(shape, strides, offset: int) -> int:
    """Storage offset plus the highest element index a view addresses, plus one (0 when
    it is empty)."""
    if any(x == 0 for x in shape):
        return 0
    return offset + 1 + sum((x - 1) * abs(st) for x, st in zip(shape, strides))


def policy_rule(fault: KnownFault, th: Thresholds = REAL):
    """The :class:`~kernelaudit.guard.policy.Rule` enforcing ``fault`` (an engine op)."""
    from .policy import MATMUL_OPS, SDPA_MPS, Rule, _attention_rule, _mps_rule

    when = fault.when
    kind = when["kind"]
    if kind == "mps-matmul":
        letter = when["rule"]
        check = _mps_rule(letter, th)
        floor = th.t31 if letter == "B" else th.t32 + 1
    elif kind == "mps-attention":
        check, floor = _attention_rule(th), th.t32 + 1
    elif kind == "numel":
        check, floor = _numel_check(when, th)
    elif kind == "dim":
        check, floor = _dim_check(when, th)
    elif kind == "bytes":
        check, floor = _bytes_check(when, th)
    else:
        check, floor = _scores_check(when, th)
    dtypes = frozenset(fault.dtypes)
    # Layouts are read coarsely: a rule seen on view layouts only (aT, slice, ...) flags
    # calls with a view operand; one seen on contig flags every layout. A finer reading
    # would let the pieces of a fix through: a piece is a view of its operand (an
    # offset), a layout the sweep may never have tried.
    views_only = bool(fault.layouts) and "contig" not in fault.layouts
    if dtypes or views_only:
        inner = check

        def check(call, inner=inner):  # noqa: F811 - the filtered check
            if dtypes and str(call.dtype).replace("torch.", "") not in dtypes:
                return None
            if views_only and call.op != SDPA_MPS and not any(m.view for m in call.operands):
                return None
            return inner(call)
    ops = frozenset({fault.op}) if fault.op in MATMUL_OPS or fault.op == SDPA_MPS else MATMUL_OPS
    device_types = None if fault.device == "any" else (fault.device,)
    # ``fix`` leaves the action to the user's choice (fix, verify, raise, ...); a rule
    # whose calls cannot be fixed says ``raise`` and keeps it whatever the global action.
    return Rule(fault.name, check, fault.explain or fault.effect, ops=ops, device_types=device_types,
                min_elements=floor, action="raise" if fault.action == "raise" else None)


def rules_policy(faults: Sequence[KnownFault], th: Thresholds = REAL, name: str = "known-faults"):
    """The policy enforcing the engine-op rules of ``faults`` (screened ops are installed
    separately, see :mod:`kernelaudit.guard.intercept`)."""
    from .policy import Policy

    rules = tuple(policy_rule(f, th) for f in faults if f.engine)
    return Policy(name, rules, None, th)


def screened(faults: Sequence[KnownFault]) -> list[KnownFault]:
    """The rules on ops outside the engine: screened at their aten entry points."""
    return [f for f in faults if not f.engine]


def screen_reason(fault: KnownFault, tensors: Sequence, out_numels: Sequence[int], th: Thresholds = REAL,
                  dtype=None, args=None) -> str | None:
    """Why a call of a screened op is unsafe (``tensors``: its tensor arguments, in
    order; ``out_numels``: its outputs' element counts, or a function giving them, called
    only by a rule that reads them; ``dtype``: the call's dtype when
    no tensor says it, e.g. a factory's; ``args``: the call's arguments by name (a dict,
    or anything with ``get``: :class:`~.separable.CallArgs`), read by ``inner_of``,
    ``norm-rows`` and ``rows``), or None."""
    when = fault.when
    if "inner_of" in when and args is not None:
        inner = inner_extent(tensors, args, when["inner_of"])
        if inner is not None and inner <= 1:
            return None  # the dim is the last one that counts: not the faulty kernel
    if fault.dtypes:
        dts = {str(t.dtype).replace("torch.", "") for t in tensors}
        if dtype is not None:
            dts.add(str(dtype).replace("torch.", ""))
        if dts and not dts & set(fault.dtypes):
            return None
    n = resolve_threshold(when["at_least"], th)
    if when["kind"] == "leading":
        got = leading_extent(tensors, args or {}, when["of"])
        return (f"the dims before its {when['of']} hold {got} >= {n} elements" if got is not None and got >= n
                else None)
    if when["kind"] == "norm-rows":
        got = norm_rows(tensors, args or {})
        if got is None:
            return None
        rows, normalized, dims = got
        if dims >= 2 and normalized < when["below_normalized"] and rows >= n:
            return (f"{rows} >= {n} rows over {dims} normalized dims of {normalized} < "
                    f"{when['below_normalized']} elements")
        return None
    if when["kind"] == "rows":
        got = norm_rows(tensors, args or {})
        return f"{got[0]} >= {n} rows of {got[1]} normalized elements" if got is not None and got[0] >= n else None
    if when["kind"] == "attention-scores":
        qi, ki = when.get("query_arg", 0), when.get("key_arg", 1)
        if max(qi, ki) >= len(tensors):
            return None
        q, k = tensors[qi], tensors[ki]
        scores = math.prod(q.shape[:-1]) * k.shape[-2]
        return f"attention scores have {scores} >= {n} elements" if scores >= n else None
    if when["kind"] == "dim":
        d, rank = when["dim"], when.get("ndim")
        big = _longest_along((t.shape for t in tensors), d, rank)
        return (f"a {'' if rank is None else f'{rank}-d '}tensor argument has {big} >= {n} along dim {d}"
                if big >= n else None)
    if when["kind"] == "bytes":
        big = max((_extent(t.shape, t.stride(), t.storage_offset()) * t.element_size() for t in tensors), default=0)
        return f"a tensor argument's storage reaches {big} >= {n} bytes" if big >= n else None
    kind = when.get("tensor", "any")
    if kind in ("output", "any") and callable(out_numels):
        out_numels = out_numels()  # computed only here, where a rule reads them
    sizes = list(out_numels) if kind == "output" else [t.numel() for t in tensors] + (
        list(out_numels) if kind == "any" else [])
    big = max(sizes) if sizes else 0
    return f"a tensor of the call has {big} >= {n} elements" if big >= n else None
