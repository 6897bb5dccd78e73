"""The campaign's worker: one process judges a batch of mutants of one subject.

Started by :mod:`.campaign` as ``python -m kernelaudit.zoo.mutate.worker``, it reads one
job (JSON) on stdin and writes events, one JSON object a line, on the descriptor the
parent passes (``--events-fd``): ``start`` before each mutant, then its record; one
``subject`` record first when asked to check the clean candidate. Anything the
candidates print goes to stderr, never into the events.

Per subject, once: the problem and the clean candidate load; the *equivalence inputs*
(the small case at three seeds, every value kind, two boundary shapes) run through the
clean candidate, recording its outputs, its inputs afterwards and (kernels interpreted
on the CPU, or PyTorch code) the lines it executed. With ``check_clean``: every oracle
judges the clean candidate (it must pass) and a forced failure (every output value ``t`` made ``t + |t| + 1``:
it must be caught).

Per mutant, under a deadline: a mutant whose lines (from the subject's site table, one
walk per batch) the clean candidate never executed is *equivalent* before it is even
produced; otherwise it is produced (one line spliced where exact) and loaded (a failure
is *stillborn*) and runs on the equivalence inputs: raising on the first is
*stillborn* (a Triton compile error) or a *crash*; bit-identical outputs and inputs on
all of them is *equivalent*; else every oracle judges it (``killed``: wrong or error;
``survived``: ok; ``unjudged``: skipped).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

#: Outcomes of a mutant, in the order reports list them.
OUTCOMES = ("killed", "survived", "equivalent", "stillborn", "crash", "timeout", "unjudged")
#: Seeds of the equivalence inputs drawn with the problem's own get_inputs().
EQUIVALENCE_SEEDS = (42, 1, 2)
#: Characters of a verdict message kept in a record.
MESSAGE_CHARS = 240


class Deadline(KeyboardInterrupt):
    """The mutant's time is up (a KeyboardInterrupt: no candidate handler swallows it)."""


# ---------------------------------------------------------------------------
# oracles by column name
# ---------------------------------------------------------------------------

def make_column(column: str):  # noqa: ANN201
    """The oracle of a column: ``kernelbench@1e-4`` sets the tolerance, anything else is ``--oracle`` text."""
    from ..oracles import make_oracle

    if column.startswith("kernelbench@"):
        return make_oracle("kernelbench", tol=float(column.split("@", 1)[1]))
    return make_oracle(column)


#: Order in which the parts of an alias column (``strongest``) are tried when they are not columns
#: themselves: cheapest and most often killing first (per-column seconds measured on corpus mutants).
PART_ORDER = ("bound", "static", "values", "shapes", "tamper")


def judge_columns(problem, candidate, columns: list[str], device: str, small: bool,  # noqa: ANN001
                  seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """Every column's verdict of one candidate (a fresh case and subject each); aliases from their parts.

    An alias (``strongest`` = bound, shapes, values, tamper, static) whose parts are all
    columns is the worst of their verdicts. Otherwise its parts run one at a time, each
    alone on a fresh case, in :data:`PART_ORDER`, and stop at the first that rejects: the
    alias's verdict is the worst of its parts, so one rejecting part decides ``killed``
    exactly as running them all would (its message names the part and the parts not run).
    ``seconds``, when given, receives each column's wall time (where a judged mutant's cost goes)."""
    from ...verdict import Verdict, worst
    from ..oracles import ALIASES, Subject
    from ..oracles.base import combine, judge_or_unjudged
    from ..problems.problem_case import ProblemCase

    subject = Subject(candidate)

    def one(column: str) -> Any:  # noqa: ANN401
        case = ProblemCase.make(problem, device=device, small=small)
        try:
            return judge_or_unjudged(make_column(column), case, subject.fresh())
        except Deadline:
            raise
        except Exception as exc:  # noqa: BLE001 - an oracle failing on a mutant is an error verdict
            return Verdict.error(f"{case.describe()}: checking raised {type(exc).__name__}: {exc}")

    verdicts: dict[str, Any] = {}
    for column in columns:
        parts = ALIASES.get(column)
        if parts and all(p in verdicts for p in parts):
            verdicts[column] = worst([verdicts[p] for p in parts])
            continue
        t0 = time.perf_counter()
        if parts:
            got: dict[str, Any] = {}
            for part in sorted(parts, key=lambda p: PART_ORDER.index(p) if p in PART_ORDER else len(PART_ORDER)):
                got[part] = verdicts[part] if part in verdicts else one(part)
                if column_outcome(got[part]) == "killed":
                    break
            v = combine(column, got)
            rest = [p for p in parts if p not in got]
            if rest:  # the verdict says which parts it did not need
                v = dataclasses.replace(v, message=f"{v.message}; not run (a part already rejects): {', '.join(rest)}")
            verdicts[column] = v
        else:
            verdicts[column] = one(column)
        if seconds is not None:
            seconds[column] = round(time.perf_counter() - t0, 4)
    return verdicts


def column_outcome(verdict) -> str:  # noqa: ANN001
    """killed (wrong or error), survived (ok) or unjudged (skipped)."""
    from ...verdict import Status

    if verdict.status is Status.OK:
        return "survived"
    return "unjudged" if verdict.status is Status.SKIPPED else "killed"


# ---------------------------------------------------------------------------
# the per-input kill matrix (suite candidates)
# ---------------------------------------------------------------------------

def suite_cases(problem, device: str, small: bool) -> list:  # noqa: ANN001
    """(spec, case, comparator) per suite-candidate input, reference and error model prepared once."""
    from ..oracles.suite import candidate_specs, default_comparator

    out = []
    for spec in candidate_specs(problem, small=small, device=device):
        case = spec.case(problem, device)
        comp = default_comparator()
        try:
            comp.prepare(case)
        except Exception:  # noqa: BLE001 - no reference or model at this input: not a column
            continue
        out.append((spec, case, comp))
    return out


def judge_inputs(candidate, cases: list) -> dict[str, int]:  # noqa: ANN001
    """label -> 1 (killed: wrong, or raising) / 0 (passed) of one candidate on every suite input,
    run as a :class:`~kernelaudit.zoo.oracles.suite.PoisonedSubject` (uninitialised memory NaN);
    an input the comparator cannot judge (skipped) is left out."""
    import torch

    from ...verdict import Status
    from ..oracles import Subject
    from ..oracles.suite import PoisonedSubject

    subject = PoisonedSubject(Subject(candidate))  # as a suite file is replayed
    got: dict[str, int] = {}
    for spec, case, comp in cases:
        inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs]
        try:
            v = comp.compare(case, subject(case, inputs))
        except Deadline:
            raise
        except BaseException:  # noqa: BLE001 - a candidate raising on an input is caught by that input
            got[spec.label] = 1
            continue
        if v.status is not Status.SKIPPED:
            got[spec.label] = 0 if v.status is Status.OK else 1
    return got


def input_bounds(cases: list) -> dict[str, float]:  # noqa: ANN001
    """label -> how loose each suite input's error bound is: the largest, over the outputs the
    derived model bounds, of rms(allowed error) / rms(reference). The suites prefer inputs whose
    bound is near the problem's tightest (:data:`~.suites.SHARP_FACTOR`): where a model's
    conditioning varies with the input (a BatchNorm in training mode over a batch of 2 or 3
    maps each channel to about +-1), a loose bound hides faults of every size below it. Inputs
    judged exactly, or without a derived model, are left out."""
    import torch

    from ..oracles.bound import derive_or_none

    out: dict[str, float] = {}
    for spec, case, _ in cases:
        dm = derive_or_none(case)
        if isinstance(dm, str):
            continue
        ratios = []
        for a, r in zip(dm.allowed, case.reference()):
            if a is None or not isinstance(r, torch.Tensor) or r.numel() == 0:
                continue
            ref = torch.nan_to_num(r.detach().double(), nan=0.0, posinf=0.0, neginf=0.0)
            rms = ref.pow(2).mean().sqrt().item()
            ratios.append(a.detach().double().pow(2).mean().sqrt().item() / max(rms, 1e-300))
        if ratios:
            out[spec.label] = float(max(ratios))
    return out


# ---------------------------------------------------------------------------
# equivalence inputs and bit-identical comparison
# ---------------------------------------------------------------------------

def equivalence_cases(problem, device: str, small: bool) -> list:  # noqa: ANN001
    """The varied input set: the small case at several seeds, every value kind, two boundary shapes."""
    from ..oracles.shapes import shape_variants
    from ..oracles.values import VALUE_KINDS, value_inputs
    from ..problems.problem_case import ProblemCase

    base = ProblemCase.make(problem, device=device, small=small)
    cases = [base] + [ProblemCase.make(problem, device=device, small=small, seed=s, label=f"seed {s}")
                      for s in EQUIVALENCE_SEEDS[1:]]
    for i, kind in enumerate(VALUE_KINDS):
        cases.append(base.with_inputs(value_inputs(base, kind, 7000 + i), f"values {kind}"))
    over = dict(problem.small()) if small else {}
    for label, shapes in [v for v in shape_variants(base.shapes) if v[0].startswith(("prime below", "one past"))]:
        try:
            c = ProblemCase.make(problem, device=device, shapes={**over, **shapes}, label=f"shape {label}")
            c.reference()
        except Exception:  # noqa: BLE001 - the reference rejects that shape: not an input of the set
            continue
        cases.append(c)
    return cases


def _bits(t) -> bytes:  # noqa: ANN001
    return t.detach().contiguous().cpu().reshape(-1).view(__import__("torch").uint8).numpy().tobytes() \
        if t.numel() else b""


def run_on(candidate, case) -> tuple[list, list]:  # noqa: ANN001
    """(output fingerprints, input fingerprints after the run) of one fresh candidate instance on ``case``."""
    import torch

    from ..oracles import Subject

    inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs]
    outs = Subject(candidate)(case, inputs)
    fp = [(tuple(o.shape), str(o.dtype), _bits(o)) for o in outs]
    after = [_bits(x) for x in inputs if isinstance(x, torch.Tensor)]
    return fp, after


# ---------------------------------------------------------------------------
# coverage of the clean candidate
# ---------------------------------------------------------------------------

def statement_heads(source: str) -> dict[int, int]:
    """line -> first line of the innermost statement (a compound statement: its header) holding it."""
    heads: dict[int, int] = {}
    for node in ast.walk(ast.parse(source)):  # breadth first: inner statements overwrite outer ones
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        end = body[0].lineno - 1 if isinstance(body, list) and body and isinstance(body[0], ast.stmt) \
            else node.end_lineno
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for line in range(start, max(end, node.lineno) + 1):
            heads[line] = node.lineno
    return heads


class LineTrace:
    """Lines of one file executed while active (``sys.settrace``, only that file's frames traced)."""

    def __init__(self, path: Path) -> None:
        self.path = str(Path(path).resolve())
        self.lines: set[int] = set()

    def _local(self, frame, event, arg):  # noqa: ANN001
        if event == "line":
            self.lines.add(frame.f_lineno)
        return self._local

    def _global(self, frame, event, arg):  # noqa: ANN001
        if frame.f_code.co_filename == self.path:
            self.lines.add(frame.f_lineno)
            return self._local
        return None

    def __enter__(self) -> "LineTrace":
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        sys.settrace(self._previous)


# ---------------------------------------------------------------------------
# the Triton CPU interpreter without its repeated patching
# ---------------------------------------------------------------------------

def lighten_interpreter() -> bool:
    """Make Triton's CPU interpreter skip re-patching ``triton.language`` for nested ``@jit`` calls.

    Why: the interpreter patches the language module (``inspect.getmembers`` over it, a few
    ms) at every launch *and* again at every call of a ``@jit`` helper from inside a kernel,
    which was about a quarter of a corpus worker's time (cProfile, triton 3.9). Inside a
    launch the modules are already patched, so the nested patching only sets the same
    wrappers again (and is never undone by itself: the launch's own restore undoes it);
    skipping it when the helper sees no language module the launch has not patched
    changes no result (tests compare outputs bit for bit). False when the interpreter's
    internals are not the ones this was written for (nothing changed then).
    """
    try:
        import inspect

        import triton.language as tl
        import triton.runtime.interpreter as ti
    except Exception:  # noqa: BLE001 - no Triton: nothing to lighten
        return False
    if getattr(ti, "_kernelaudit_light", False):
        return True
    if not all(hasattr(ti, n) for n in ("_patch_lang", "GridExecutor", "_LangPatchScope")):
        return False
    original, launch = ti._patch_lang, ti.GridExecutor.__call__
    patched: list[frozenset[int]] = []  # per launch in progress: ids of the language modules it patched

    def langs(fn) -> frozenset[int]:  # noqa: ANN001 - the modules the interpreter's own _patch_lang picks
        return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))

    def patch_lang(fn):  # noqa: ANN001, ANN202
        mine = langs(fn)
        if patched and mine and mine <= patched[-1]:
            return ti._LangPatchScope()  # already patched by this launch: nothing to set or restore
        scope = original(fn)
        if patched:
            patched[-1] = patched[-1] | mine
        return scope

    def call(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        patched.append(frozenset())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    ti._patch_lang = patch_lang
    ti.GridExecutor.__call__ = call
    ti._kernelaudit_light = True
    return True


#: In the message of every access :func:`guard_interpreter_memory` refuses.
GUARD_MARK = "refused by kernelaudit's interpreter guard"


def guard_interpreter_memory() -> bool:
    """Make Triton's CPU interpreter refuse a load or store outside its launch's tensors.

    Why: the interpreter reads and writes raw addresses. A mutant that drops a mask reads
    or writes past its tensors, which corrupts the worker's heap: the process aborts
    (``free(): invalid pointer``) or, with the heap in another layout, hangs in the
    allocator until the campaign's timeout (120 s each). Here every active lane's address
    is checked against the storages of the launch's tensor arguments (whole storages:
    what a GPU could touch without faulting), and an access outside all of them raises
    ``IndexError`` in the kernel: the candidate raises, as a faulting GPU kernel would.
    In bounds nothing changes (same loads, same stores). False when the interpreter's
    internals are not the ones this was written for (nothing changed then).
    """
    try:
        import numpy as np
        import triton.runtime.interpreter as ti
    except Exception:  # noqa: BLE001 - no Triton: nothing to guard
        return False
    if getattr(ti, "_kernelaudit_guarded", False):
        return True
    builder = type(getattr(ti, "interpreter_builder", None))
    needed = ("create_masked_load", "create_masked_store")
    if not all(hasattr(builder, n) for n in needed) or not hasattr(ti.GridExecutor, "_init_args_hst") \
            or not hasattr(ti, "_get_np_dtype"):
        return False
    ranges: list[np.ndarray] = []  # per launch in progress: [[start, end), ...] of its tensors' storages

    def storages(arg, out: list) -> None:  # noqa: ANN001
        if isinstance(arg, (tuple, list)):
            for a in arg:
                storages(a, out)
        elif hasattr(arg, "base") and hasattr(arg, "block_shape"):  # a TensorDescriptor
            storages(arg.base, out)
        elif hasattr(arg, "untyped_storage"):
            st = arg.untyped_storage()
            out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))

    init, load, store = ti.GridExecutor._init_args_hst, builder.create_masked_load, builder.create_masked_store

    def init_args(self, args_dev, kwargs):  # noqa: ANN001, ANN202
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        found: list = []
        storages(list(args_hst) + list(kwargs_hst.values()), found)
        ranges.append(np.array(found or [(0, 0)], dtype=np.uint64))
        return args_hst, kwargs_hst

    def check(ptrs, mask, what: str) -> None:  # noqa: ANN001
        if not ranges:
            return
        addr = np.asarray(ptrs.data, dtype=np.uint64).reshape(-1)
        active = np.asarray(mask.data, dtype=bool).reshape(-1) if mask is not None else None
        if active is not None:
            addr = addr[np.broadcast_to(active, addr.shape) if active.shape != addr.shape else active]
        if addr.size == 0:
            return
        size = np.uint64(ti._get_np_dtype(ptrs.get_element_ty()).itemsize)
        r = ranges[-1]
        lo, hi = addr.min(), addr.max() + size
        if ((lo >= r[:, 0]) & (hi <= r[:, 1])).any():  # the usual case: every lane in one tensor
            return
        ok = ((addr[:, None] >= r[None, :, 0]) & (addr[:, None] + size <= r[None, :, 1])).any(axis=1)
        if not ok.all():
            bad = int(addr[~ok][0])
            raise IndexError(f"out-of-bounds {what} at address {bad:#x}: outside every tensor of the launch "
                             f"({GUARD_MARK})")

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):  # noqa: ANN001, ANN202
        check(ptrs, mask, "load")
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):  # noqa: ANN001, ANN202
        check(ptrs, mask, "store")
        return store(self, ptrs, value, mask, cache_policy)

    launch = ti.GridExecutor.__call__

    def call(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        depth = len(ranges)
        try:
            return launch(self, *args, **kwargs)
        finally:
            del ranges[depth:]

    ti.GridExecutor._init_args_hst = init_args
    ti.GridExecutor.__call__ = call
    builder.create_masked_load = masked_load
    builder.create_masked_store = masked_store
    ti._kernelaudit_guarded = True
    return True


# ---------------------------------------------------------------------------
# the job
# ---------------------------------------------------------------------------

def _forced_failure(clean):  # noqa: ANN001, ANN202
    """The clean candidate with every output value ``t`` made ``t + |t| + 1`` (integers: plus one),
    off by at least 1 and at least ``|t|`` everywhere (``2t + 1`` is right where an output is
    clamped at -1): a value-comparing oracle that passes it cannot judge this subject."""
    import torch

    from ..problems.loader import Candidate

    base = clean.ModelNew

    class Forced(base):  # type: ignore[misc, valid-type]
        def forward(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = super().forward(*args, **kwargs)
            def bump(t):  # noqa: ANN001, ANN202
                if not isinstance(t, torch.Tensor):
                    return t
                return t + t.abs() + 1 if t.is_floating_point() or t.is_complex() else t + 1

            return type(out)(bump(t) for t in out) if isinstance(out, (tuple, list)) else bump(out)

    module = types.ModuleType("forced_failure")
    module.ModelNew = Forced
    module.__file__ = str(clean.path)
    return Candidate(name="forced-failure", path=clean.path, module=module)


def _short(v) -> str:  # noqa: ANN001
    return (v.message or "")[:MESSAGE_CHARS]


def _stillborn_error(exc: BaseException) -> bool:
    """A program Triton rejects (a compile error; in the interpreter, the type and shape errors it raises
    while tracing a kernel, which the compiler raises before any launch), as opposed to a crash while running."""
    if any(e is not None and GUARD_MARK in str(e) for e in (exc, exc.__cause__, exc.__context__)):
        return False  # an out-of-bounds access the interpreter guard refused: a run-time fault
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and (type(e).__name__ in ("CompilationError", "InterpreterError", "IncompatibleTypeErrorImpl")
                              or type(e).__module__.startswith("triton.")):
            return True
    return False


def _exc_text(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at line {tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}{where}: {exc}"[:MESSAGE_CHARS]


class Job:
    """One batch: a subject, its mutants, the columns, the device, the deadline."""

    def __init__(self, job: dict[str, Any], emit) -> None:  # noqa: ANN001
        from .subjects import Subject

        s = job["subject"]
        self.subject = Subject(s["id"], s["kind"], Path(s["problem_path"]), s["source"], tuple(s["scope"]))
        self.mutants: list[str] = job["mutants"]
        self.columns: list[str] = job["columns"]
        self.device: str = job["device"]
        self.small: bool = job["small"]
        self.timeout_s: float = job["timeout_s"]
        self.check_clean: bool = job["check_clean"]
        #: Record the per-input kill matrix (suite-candidate inputs, each judged alone).
        self.per_input: bool = job.get("per_input", False)
        self.inputs: list = []
        self.inputs_error: str | None = None
        self.setup_s: float | None = None
        self.scratch = Path(job["scratch"])
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.emit = emit

    # -- setup ----------------------------------------------------------------
    def setup(self) -> str | None:
        """Load the problem and the clean candidate and run the equivalence inputs; None, or why not."""
        from ..problems import load_candidate, load_problem

        try:
            self.problem = load_problem(self.subject.problem_path)
        except Exception as exc:  # noqa: BLE001
            return f"the problem does not load: {exc}"[:MESSAGE_CHARS]
        clean_path = self.scratch / "clean.py"
        clean_path.write_text(self.subject.source)
        # kernels whose lines Python runs (the interpreter on the CPU) or PyTorch code: coverage is exact
        self.traced = self.subject.kind == "torch" or self.device == "cpu"
        trace = LineTrace(clean_path)  # loading counts: a class body runs then
        try:
            with trace:
                self.clean = load_candidate(clean_path)
            self.cases = equivalence_cases(self.problem, self.device, self.small)
        except Exception as exc:  # noqa: BLE001
            return f"the clean candidate or its inputs do not load: {_exc_text(exc)}"
        self.reference: list[tuple] = []
        kept = []
        for i, case in enumerate(self.cases):
            try:
                if self.traced:
                    with trace:
                        fp = run_on(self.clean, case)
                else:
                    fp = run_on(self.clean, case)
            except Exception as exc:  # noqa: BLE001
                if i == 0:
                    return f"the clean candidate raises on {case.describe()}: {_exc_text(exc)}"
                continue  # an input the clean candidate itself cannot take is not in the set
            kept.append(case)
            self.reference.append(fp)
        self.cases = kept
        try:
            self.inputs = suite_cases(self.problem, self.device, self.small) if self.per_input else []
        except Exception as exc:  # noqa: BLE001 - no suite columns for this subject; the oracles still judge
            self.inputs = []
            self.inputs_error = _exc_text(exc)
        self.heads = statement_heads(self.subject.source)  # once: it parses the whole subject
        self.executed = {self.heads.get(n, n) for n in trace.lines}
        from .generate import SiteTable

        self.table = SiteTable(self.subject)  # every site's lines and text edit, from one walk
        return None

    def subject_record(self, failure: str | None) -> dict[str, Any]:
        rec: dict[str, Any] = {"type": "subject", "subject": self.subject.id, "digest": self.subject.digest,
                               "kind": self.subject.kind, "problem": str(self.subject.problem_path)}
        if failure:
            rec["error"] = failure
            return rec
        t0 = time.perf_counter()
        rec["equivalence_inputs"] = [c.label for c in self.cases]
        rec["executed_lines"] = len(self.executed) if self.traced else None
        clean = judge_columns(self.problem, self.clean, self.columns, self.device, self.small)
        forced = judge_columns(self.problem, _forced_failure(self.clean), self.columns, self.device, self.small)
        rec["clean"] = {c: column_outcome(v) for c, v in clean.items()}
        rec["clean_messages"] = {c: _short(v) for c, v in clean.items() if column_outcome(v) != "survived"}
        rec["forced"] = {c: column_outcome(v) for c, v in forced.items()}
        if self.per_input:  # the columns of the kill matrix, and the clean candidate on each (must pass)
            rec["suite_inputs"] = [spec.to_json() for spec, _, _ in self.inputs]
            rec["clean_inputs"] = judge_inputs(self.clean, self.inputs)
            rec["clean_bounds"] = input_bounds(self.inputs)
            if self.inputs_error:
                rec["suite_inputs_error"] = self.inputs_error
        if self.subject.id.startswith("corpus/"):  # the problem's known-correct variants: false rejections
            from ..problems import load_candidate
            from .subjects import correct_variants

            rec["variants"] = {}
            for name, problem_path, path in correct_variants():
                if Path(problem_path).resolve() == Path(self.subject.problem_path).resolve():
                    got = judge_columns(self.problem, load_candidate(path), self.columns, self.device, self.small)
                    rec["variants"][name] = {c: column_outcome(v) for c, v in got.items()}
                    if self.per_input:
                        rec.setdefault("variant_inputs", {})[name] = judge_inputs(load_candidate(path), self.inputs)
        # seconds of this subject's setup (once per worker) and of the checks above (once per subject)
        rec["timing"] = {"setup": self.setup_s, "checks": round(time.perf_counter() - t0, 3)}
        return rec

    # -- one mutant -------------------------------------------------------------
    def ran_any(self, lines) -> bool:  # noqa: ANN001
        """Did the clean candidate run any of these source lines (by their statements' first lines)?"""
        return any(self.heads.get(n, n) in self.executed for n in lines)

    def judge(self, mutant_id: str, index: int) -> dict[str, Any]:
        from ..problems import load_candidate
        from .generate import Mutant, materialise

        m = Mutant.parse(mutant_id)
        rec: dict[str, Any] = {"type": "mutant", "id": mutant_id, "subject": m.subject, "operator": m.operator,
                               "family": m.family, "site": m.site}
        touched = self.table.touched_lines(m)
        if self.traced and touched is not None and not self.ran_any(touched):
            # decided before the mutant is produced: no line its node spans ever ran (the lines a
            # mutation changes lie inside that span), so it behaves as the clean candidate does
            rec["lines"] = list(touched)
            return {**rec, "outcome": "equivalent", "reason": "changed lines never run by the clean candidate "
                                                              "on the equivalence inputs"}
        try:
            mat = materialise(self.subject, m, self.table)
        except Exception as exc:  # noqa: BLE001 - no such site, or a rewrite that does not print
            return {**rec, "outcome": "stillborn", "reason": f"not produced: {_exc_text(exc)}"}
        rec.update(lines=list(mat.lines), before=mat.before, after=mat.after)
        if self.traced and not self.ran_any(mat.lines):
            return {**rec, "outcome": "equivalent", "reason": "changed lines never run by the clean candidate "
                                                              "on the equivalence inputs"}
        path = self.scratch / f"m{index}.py"
        path.write_text(mat.source)
        t0 = time.perf_counter()
        timing = rec["timing"] = {}  # seconds per stage: where a mutant's cost goes (the cost floor)
        try:
            cand = load_candidate(path)
        except Exception as exc:  # noqa: BLE001
            return {**rec, "outcome": "stillborn", "reason": _exc_text(exc)}
        timing["load"] = round(time.perf_counter() - t0, 4)
        t0 = time.perf_counter()
        same = True
        for i, (case, ref) in enumerate(zip(self.cases, self.reference)):
            try:
                got = run_on(cand, case)
            except Deadline:
                raise
            except BaseException as exc:  # noqa: BLE001 - even SystemExit from the candidate
                if i == 0:
                    kind = "stillborn" if _stillborn_error(exc) else "crash"
                    return {**rec, "outcome": kind, "reason": f"{case.describe()}: {_exc_text(exc)}"}
                same = False
                break
            if i == 0:  # the first run compiles (a Triton kernel's JIT): the rest is the physical cost
                timing["first_input"] = round(time.perf_counter() - t0, 4)
            if got != ref:
                same = False
                break
        timing["equivalence"] = round(time.perf_counter() - t0, 4)
        if same:
            return {**rec, "outcome": "equivalent", "reason": f"bit-identical outputs and inputs on "
                                                              f"{len(self.cases)} equivalence inputs"}
        t0 = time.perf_counter()
        verdicts = judge_columns(self.problem, cand, self.columns, self.device, self.small,
                                 seconds=timing.setdefault("columns", {}))
        timing["oracles"] = round(time.perf_counter() - t0, 4)
        rec["oracles"] = {c: column_outcome(v) for c, v in verdicts.items()}
        rec["messages"] = {c: _short(v) for c, v in verdicts.items() if column_outcome(v) == "killed"}
        if self.per_input:
            t0 = time.perf_counter()
            rec["inputs"] = judge_inputs(cand, self.inputs)
            timing["inputs"] = round(time.perf_counter() - t0, 4)
        rec["outcome"] = "killed" if "killed" in rec["oracles"].values() else \
            "survived" if "survived" in rec["oracles"].values() else "unjudged"
        return rec

    # -- the loop ---------------------------------------------------------------
    def run(self, progress=None) -> None:  # noqa: ANN001
        """Set up, check the clean candidate when asked, then judge every mutant; ``progress``
        (shared memory, from :func:`run_zygote`) holds the index of the mutant being judged."""
        t0 = time.perf_counter()
        failure = self.setup()
        self.setup_s = round(time.perf_counter() - t0, 3)
        if self.check_clean or failure:
            self.emit(self.subject_record(failure))
        self.judge_from(0, failure, progress)

    def judge_from(self, first: int, failure: str | None = None, progress=None) -> None:  # noqa: ANN001
        """Judge mutants ``first`` onwards, each under the deadline."""
        for i in range(first, len(self.mutants)):
            mid = self.mutants[i]
            if progress is not None:
                progress[:8] = i.to_bytes(8, "little", signed=True)
            self.emit({"type": "start", "id": mid})
            start = time.perf_counter()
            if failure:
                rec = {"type": "mutant", "id": mid, "outcome": "unjudged", "reason": failure}
            else:
                signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
                try:
                    rec = self.judge(mid, i)
                except Deadline:
                    from .generate import Mutant

                    m = Mutant.parse(mid)
                    rec = {"type": "mutant", "id": mid, "subject": m.subject, "operator": m.operator,
                           "family": m.family, "site": m.site, "outcome": "timeout",
                           "reason": f"no verdict within {self.timeout_s:g} s"}
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            rec["seconds"] = round(time.perf_counter() - start, 3)
            self.emit(rec)


def run_zygote(job: dict[str, Any], emit, enter) -> int:  # noqa: ANN001
    """Judge the job in forked children of this process. This process has imported torch, Triton
    and the oracles; it enters the sandbox (``enter``), sets the subject up once (the problem, the
    clean candidate, the equivalence and suite inputs, the site table: no mutant code) and checks
    the clean candidate when asked; then each child judges what is left. A child that dies (a
    mutant that corrupts memory, ``os._exit``) costs a fork, not a setup: its mutant is recorded
    ``crash`` here and the next child takes the rest. Returns this process's exit code (1 when a
    child died before judging any mutant: the campaign then reports the batch as failed)."""
    import mmap

    from .generate import Mutant

    enter(job)
    work = Job(job, emit)
    t0 = time.perf_counter()
    failure = work.setup()
    work.setup_s = round(time.perf_counter() - t0, 3)
    if work.check_clean or failure:
        emit(work.subject_record(failure))
    if failure:  # every mutant unjudged, with the reason: no candidate code runs
        work.judge_from(0, failure)
        return 0
    progress = mmap.mmap(-1, 8)  # MAP_SHARED: the child's writes are seen here
    first = 0
    while first < len(work.mutants):
        progress[:8] = (-1).to_bytes(8, "little", signed=True)
        pid = os.fork()
        if pid == 0:  # the child: already in the box and set up; judges from `first` on
            code = 0
            try:
                work.judge_from(first, None, progress)
                progress[:8] = len(work.mutants).to_bytes(8, "little", signed=True)
            except BaseException:  # noqa: BLE001 - the parent reports it
                traceback.print_exc()
                code = 70
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        at = int.from_bytes(progress[:8], "little", signed=True)
        if at >= len(work.mutants):  # every mutant recorded (a nonzero exit after that is the child's own end)
            return 0
        if at < first:
            return 1  # died before its first mutant: nothing more of this batch can be judged
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        m = Mutant.parse(work.mutants[at])
        emit({"type": "mutant", "id": m.id, "subject": m.subject, "operator": m.operator, "family": m.family,
              "site": m.site, "outcome": "crash", "reason": f"the worker process ended (exit {code}) while judging it"})
        first = at + 1
    return 0


def _prepare(job: dict[str, Any], serving: bool = False) -> bool:
    """Process-wide set-up before any candidate code: the CPU interpreter's patches and, for a
    zygote or a fork server, the imports paid before any fork (never a CUDA context: it would
    not survive the fork). True when jobs run in a zygote."""
    if job["device"] == "cpu":
        from ...config import TRITON_INTERPRET

        os.environ[TRITON_INTERPRET.name] = "1"  # before triton is imported
        if job.get("light_interpreter", True):
            lighten_interpreter()
        if job.get("guard_interpreter", True):
            guard_interpreter_memory()
    # a zygote on the CPU (a CUDA context does not survive a fork): imports paid once per batch
    zygote = job.get("zygote", True) and job["device"] == "cpu" and hasattr(os, "fork")
    if zygote or serving:
        import torch

        from .. import oracles  # noqa: F401 - imported once, before any fork
        from ..problems import load_problem  # noqa: F401

        # no OpenMP pool is started before the fork, and every child computes as the others do
        torch.set_num_threads(1)

    def expire(signum, frame):  # noqa: ANN001, ARG001
        raise Deadline()

    signal.signal(signal.SIGALRM, expire)
    return zygote


def _enter(job: dict[str, Any]) -> None:
    if job.get("sandbox", True):  # the mutants are untrusted code: in the box before any of it loads
        from ..sandbox import enter_worker

        enter_worker(job)


def serve(events) -> int:  # noqa: ANN001
    """``--serve``: judge every job read from stdin (one JSON object a line), each in a forked
    child that runs it as a zygote would (on CUDA: in-process, in the child's own context),
    and end each job's events with ``job_end`` and the child's exit code. This process runs no candidate code and never enters the sandbox, so
    the next job starts from the same clean state; the imports are paid once."""

    def emit(rec: dict[str, Any]) -> None:
        events.write(json.dumps(rec) + "\n")
        events.flush()

    zygote = None
    for line in sys.stdin:
        job = json.loads(line)
        if zygote is None:  # the interpreter patches and imports, once, from the first job's settings
            zygote = _prepare(job, serving=True)
        import torch

        if torch.cuda.is_initialized():  # never expected: this process runs no job; a fresh server then
            print("kernelaudit: the fork server holds a CUDA context; it stops", file=sys.stderr)
            return 3
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                if zygote:
                    code = run_zygote(job, emit, _enter)
                else:  # CUDA: the child makes its own context and judges in-process
                    _enter(job)
                    Job(job, emit).run()
                    code = 0
            except BaseException:  # noqa: BLE001 - reported as the job's exit code
                traceback.print_exc()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        emit({"type": "job_end", "code": code})
    return 0


def main(argv: list[str]) -> int:
    """``python -m kernelaudit.zoo.mutate.worker --events-fd N`` with the job as JSON on stdin
    (``--serve``: one job a line, see :func:`serve`)."""
    fd = int(argv[argv.index("--events-fd") + 1])
    events = os.fdopen(fd, "w", buffering=1)
    os.dup2(2, 1)  # whatever candidates print goes to stderr
    if "--serve" in argv:
        code = serve(events)
        events.close()
        sys.stdout.flush()
        os._exit(code)
    job = json.loads(sys.stdin.read())
    zygote = _prepare(job)

    def emit(rec: dict[str, Any]) -> None:
        events.write(json.dumps(rec) + "\n")

    if zygote:
        code = run_zygote(job, emit, _enter)
        events.close()
        sys.stdout.flush()
        os._exit(code)
    _enter(job)
    Job(job, emit).run()
    events.close()
    sys.stdout.flush()
    os._exit(0)  # a candidate may have left threads behind


if __name__ == "__main__":
    sys.exit(main(sys.argv))
