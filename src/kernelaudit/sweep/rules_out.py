"""A sweep's findings as guard rules: ``rules.json`` next to the verdicts.

:func:`write_rules` (called at the end of every sweep) turns each group of ``wrong`` or
``error`` verdicts of one op, dtype, layout, direction and size series into one
:class:`~kernelaudit.guard.rules.KnownFault`:

* op: the guard's name for what the sweep's op reaches (``bmm``; ``matmul`` for the
  ops that decompose into the matmul family; other ops are screened at their aten
  entry points: those of the hand table :data:`ATEN_ENTRY` where it has the op, else
  those found by tracing the op at a tiny size, :mod:`.aten_entry`; an op whose trace
  reaches the engine's ``mm``/``bmm``/``addmm``/``baddbmm`` first is that engine op's);
* dtype, layout (forward only: a backward's failing calls have other layouts), device
  type, and the size predicate of the case's size axis (:mod:`.axes`): on
  ``elements``, the crossing tensor (the case's ``crossing_numel``), on ``dim`` and
  ``attn_batch`` dim 0 of a tensor argument (batch; the attention cases keep heads at
  1; ``sdpa.heads`` puts the batch on the heads, so its rules name dim 1), on ``bytes`` a storage's bytes (the case's ``measure``), at least one more than
  the largest correct size below the smallest wrong one (or the smallest wrong size
  when no smaller size was correct);
* a version gate on what the sweep ran on: torch and CUDA to the minor release, the
  driver to its major (the exact versions are in ``provenance.ran_on``);
* action ``fix`` where every entry point has a fix of its own in the guard
  (:data:`kernelaudit.guard.separable.OWN_FIX`: softmax's backward moved off its spatial
  kernel, ``unique_consecutive`` merged from pieces, ``linalg_matrix_exp`` in pieces of its
  batch), else ``fix`` with a ``split_dim``
  when the op is separable (a hand spec with an
  operand of one row per batch: dim 0, split by the engine or, for a screened op, the
  guard's generic split in :mod:`kernelaudit.guard.separable`; an op derived from the
  OpInfo database: the dim its recipe scales, which is also the aten entry point's dim
  for the ops of the hand table; at a traced entry point, the dim its crossing tensors
  grow along there, where the guard's split there was verified on the traced calls and
  no other op of the call touches the crossing tensor) or a factory (computed in
  pieces of offset starts), else ``raise``.

A group no entry point is found for (the trace reaches only views and copies, or ops
with no kernel of their own on the sweep's backend) gets a note saying why, not a rule.

``kernelaudit run --rules RUN/rules.json`` (or ``guard.install(rules=...)``) loads them.
"""

from __future__ import annotations

from pathlib import Path

from ..thresholds import Thresholds
from ..verdict import Status
from .cases import Case
from .store import RunStore

RULES_FILE = "rules.json"
#: How a note names a fix rule none of whose tried sizes below it was correct: its limit
#: may lie lower, and its pieces may still fail (``_chunk_cat``'s did on an H100).
UNVERIFIED = "no size below"

#: Sweep op -> the guard op its calls reach (the engine's matmul family).
ENGINE_OP = {"bmm": "bmm", "mm": "mm", "addmm": "addmm", "baddbmm": "baddbmm", "matmul3d": "matmul",
             "matmul4d": "matmul", "einsum": "matmul", "linear": "matmul", "attention": "matmul"}
#: (sweep op, direction) -> the aten entry points where the guard screens it on CUDA
#: and other backends (ops the engine cannot split); ``*``: either direction. Overrides
#: the trace (:mod:`.aten_entry`), which agrees on arange, cdist and
#: adaptive_avg_pool1d (tests/sweep/test_aten_entry.py), and cannot show SDPA's
#: entry points: it picks its backend inside a composite, per device, so every
#: backend's is listed.
ATEN_ENTRY = {
    ("arange", "*"): ("arange.start_out",),
    # factories judged by a closed form make their own calls: no trace; their CUDA kernels
    ("linspace", "*"): ("linspace.out",),
    ("logspace", "*"): ("logspace.out",),
    ("sdpa", "fwd"): ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
                      "_scaled_dot_product_efficient_attention"),
    ("cdist", "fwd"): ("_cdist_forward",),
    ("cdist", "bwd"): ("_cdist_backward",),
    ("nn.functional.adaptive_avg_pool1d", "fwd"): ("_adaptive_avg_pool2d",),
    ("nn.functional.adaptive_avg_pool1d", "bwd"): ("_adaptive_avg_pool2d_backward",),
    ("sdpa", "bwd"): ("_scaled_dot_product_cudnn_attention_backward", "_scaled_dot_product_flash_attention_backward",
                      "_scaled_dot_product_efficient_attention_backward"),
}
#: Sweep ops screened at another op's hand entry points: the SDPA derived from the op
#: database and the explicit fused backends are the same call as ``sdpa``.
ATEN_ALIAS = {"nn.functional.scaled_dot_product_attention": "sdpa", "sdpa.flash": "sdpa",
              "sdpa.efficient": "sdpa", "sdpa.cudnn": "sdpa", "sdpa.heads": "sdpa"}
#: Tensor arguments holding query and key at a screened attention entry point (the
#: backward takes grad_out first).
SCORES_ARGS = {"fwd": (0, 1), "bwd": (1, 2)}


def _gate(env: dict) -> dict:
    def minor(v: str | None) -> str | None:
        if not v:
            return None
        parts = v.split("+", 1)[0].split(".")
        return "==" + ".".join(parts[:2]) + ".*"

    gate = {"torch": minor(env.get("torch"))}
    if env.get("cuda"):
        gate["cuda"] = minor(env["cuda"])
    if env.get("driver"):
        gate["driver"] = "==" + str(env["driver"]).split(".")[0] + ".*"
    return {k: v for k, v in gate.items() if v}


#: Size axis -> its predicate (``at_least`` added from the verdicts). The sweep's
#: ``dim`` cases grow dim 0 of the crossing operand; its ``attn_batch`` cases grow the
#: batch with one head, so what they show is a batch limit (dim 0).
AXIS_PREDICATE = {"dim": {"kind": "dim", "dim": 0}, "attn_batch": {"kind": "dim", "dim": 0},
                  "bytes": {"kind": "bytes"}}


def _measure(case: dict, axis: str) -> int | None:
    """The size a case's predicate is over: its crossing tensor's elements on the
    ``elements`` axis, else the axis' measure (dim size, batch x heads, bytes)."""
    return case.get("crossing_numel") if axis == "elements" else case.get("measure")


def _unit(bad) -> str:
    """The unit of a group's axis measure (``batch x heads``, ``bytes``, ...)."""
    return bad[0][1]["case"].get("unit") or "units"


def _split_dim(case: Case) -> int | None:
    """The dim the op splits along into independent pieces, or None: 0 for a hand spec
    with an operand of one row per batch; for an op derived from the OpInfo database,
    the dim its recipe scales (the op was verified separable along it), when every
    scaled operand scales the same dim."""
    opinfo = (case.spec.extra or {}).get("opinfo")
    if opinfo is not None:
        from .ops.opinfo import catalogue_entry
        try:
            recipe = catalogue_entry(case.spec.name).get("recipe") or {}
        except Exception:  # noqa: BLE001 - no catalogue here: no split dim known
            return None
        dims = {o["dim"] for o in recipe.get("operands", ()) if o.get("dim") is not None}
        return dims.pop() if len(dims) == 1 else None
    ops = case.spec.operands(case.series, 2, case.thresholds)
    return case.spec.extra.get("entry_dim", 0) if any(o.rows_per_batch == 1 for o in ops) else None


def hand_entry(op: str, direction: str) -> tuple[str, ...]:
    """The hand table's entry points of ``op`` in ``direction`` (empty: none)."""
    op = ATEN_ALIAS.get(op, op)
    return ATEN_ENTRY.get((op, direction)) or ATEN_ENTRY.get((op, "*")) or ()


def traced_entry(case: Case, device: str):
    """The entry points of ``case``'s op on ``device`` found by tracing it at a tiny
    size with the case's series, dtype and layout (:mod:`.aten_entry`)."""
    from .aten_entry import entry_points

    return entry_points(case.op, case.direction, device=device, series=case.series, dtype=case.dtype,
                        layout=case.layout)


#: The message of a case left unjudged because its tolerance key could not be calibrated.
UNCALIBRATED = "calibration failed below the thresholds: no tolerance to judge with"


def unjudged(verdict: dict) -> bool:
    """An ``error`` verdict that says nothing about the op's size: its case timed out (the
    worker was killed), kernelaudit itself failed on it, or its op failed far below the
    limits too (calibration: the fault is not a size's). Such cases are left out of rules
    (a 60 s timeout of interpolate below 2^31 on the H200 made a rule start there)."""
    details = verdict.get("details") or {}
    return bool(details.get("timed_out") or details.get("checker_bug") or uncalibrated(verdict)
                or (verdict.get("message") or "").startswith("timed out after"))


def uncalibrated(verdict: dict) -> bool:
    """A case left unjudged because its tolerance key could not be calibrated (stores
    older than the ``uncalibrated`` detail say so in the message)."""
    return bool((verdict.get("details") or {}).get("uncalibrated")
                or (verdict.get("message") or "").startswith(UNCALIBRATED))


def rules_from_store(store: RunStore) -> tuple[list, list[str]]:
    """(rules, notes) for the wrong/error verdicts of ``store`` (notes: groups no rule
    could be written for, and why)."""
    # the rule format (data only): docs/architecture.md
    from ..guard.rules import ENGINE_OPS, FACTORIES, INNER_OF, KnownFault, own_fixed

    m = store.manifest()
    device = (m.get("device") or {}).get("type", "cpu")
    fault_model = m.get("fault_model", "none")
    groups: dict = {}
    sizes: dict = {}
    unjudged_cases: dict = {}
    for r in store.latest().values():
        case = Case.from_json(r["case"])
        status = r["verdict"]["status"]
        crossing = _measure(r["case"], case.axis)
        if crossing is None:
            continue
        key = (case.op, case.dtype, case.layout, case.direction, case.series, case.axis)
        if status == Status.ERROR.value and unjudged(r["verdict"]):
            unjudged_cases.setdefault(key, []).append(case.id)
            continue
        sizes.setdefault(key, []).append((int(crossing), status))
        if status in (Status.WRONG.value, Status.ERROR.value):
            groups.setdefault(key, []).append((case, r))
    rules, notes = [], []
    for key, ids in sorted(unjudged_cases.items()):
        op, dtype, layout, direction, series, _ = key
        notes.append(f"{op}/{dtype}/{layout}/{direction}/{series}: {len(ids)} case(s) not judged (a timeout or a "
                     f"checker failure, not a finding of the op): {', '.join(sorted(ids)[:4])}")
    ran_on = {k: m.get(k) for k in ("torch", "cuda", "driver")}
    # every device the run went on (a resumed run's segments name theirs)
    devices = sorted({(s.get("device") or m.get("device") or {}).get("name") for s in m.get("segments") or ()} - {None})
    gate = _gate(m)
    for key in sorted(groups):
        op, dtype, layout, direction, series, axis = key
        bad = groups[key]
        case0 = bad[0][0]
        smallest = min(int(_measure(r["case"], axis)) for _, r in bad)
        below_ok = [n for n, s in sizes[key] if s == Status.OK.value and n < smallest]
        at_least = max(below_ok) + 1 if below_ok else smallest
        effects = {r["verdict"]["status"] for _, r in bad}
        effect = "wrong" if "wrong" in effects else "error"
        sep_dim = _split_dim(case0)
        guard_op = ENGINE_OP.get(op)
        aten: tuple = ()
        traced = None
        where = f"{op}/{dtype}/{layout}/{direction}/{series}: {len(bad)} {effect} case(s)"
        if guard_op is None:
            aten = hand_entry(op, direction)
            if not aten:
                traced = traced_entry(case0, device)
                aten = traced.aten
                if not aten:
                    notes.append(f"{where}, no aten entry point found by tracing it ({traced.reason}): "
                                 "no rule written")
                    continue
                reached = {a.partition(".")[0] for a in aten}
                if len(reached) == 1 and reached <= set(ENGINE_OPS):  # the engine splits it itself
                    guard_op, aten = reached.pop(), ()
            guard_op = guard_op or op
        if traced is not None and axis == "dim":
            if traced.scaled_dim is None:
                notes.append(f"{where}, on the dim axis, but dim 0 of its crossing operand is no one dim at its "
                             f"entry point {', '.join(traced.aten)}: no rule written")
                continue
            when = {"kind": "dim", "dim": traced.scaled_dim, "at_least": at_least}
        elif axis in AXIS_PREDICATE:
            when = {**AXIS_PREDICATE[axis], "at_least": at_least}
            if when["kind"] == "dim":  # where the op's kernel sees the sweep's batch
                when["dim"] = case0.spec.extra.get("entry_dim", when["dim"])
        elif case0.spec.family == "attention" and guard_op not in ENGINE_OPS and traced is None:
            qi, ki = SCORES_ARGS[direction]
            when = {"kind": "attention-scores", "at_least": at_least, "query_arg": qi, "key_arg": ki}
        else:
            when = {"kind": "numel", "tensor": "output" if case0.spec.family == "factory" else "any",
                    "at_least": at_least}
        if len(aten) == 1 and (arg := INNER_OF.get(aten[0])):
            when["inner_of"] = arg  # the entry's faulty kernel only (guard.rules.INNER_OF says which)
        # the engine splits its ops along batch; a screened op splits along split_dim
        # (separable) or, a factory, along its output
        split_dim = 0 if guard_op in FACTORIES else sep_dim
        if traced is not None and aten:  # screened at a traced entry point: its verified dim
            split_dim = traced.split_dim if sep_dim is not None else None
        action = "fix" if split_dim is not None or own_fixed(aten) else "raise"
        if not below_ok and action == "fix":
            # the limit lies at or below every size tried: pieces under this threshold may
            # still fail (_chunk_cat's grid z, 65,535, under sizes from 65,533 x 2 up)
            notes.append(f"{where} ({axis} axis): {UNVERIFIED} {smallest} was tried correct, so the fault may begin lower "
                         "than this rule says and its pieces may still fail: check the fix on the device "
                         "(the finding's program under kernelaudit run)")
        first = bad[0][1]["verdict"]
        th = Thresholds(case0.scale)
        rules.append(KnownFault(
            name=f"sweep-{device}-{op}-{dtype}-{layout}-{direction}-{series}" + ("" if axis == "elements" else f"-{axis}"),
            op=guard_op, device=device, effect=effect, when=when, dtypes=(dtype,),
            layouts=(layout,) if direction == "fwd" and op in ENGINE_OP else (),
            versions=gate, action=action,
            split_dim=split_dim, aten=aten,
            explain=(f"{op} {dtype} {layout} {direction}: {len(bad)} {effect} case(s) from {at_least} "
                     + (f"crossing elements (2^32 = {th.t32} here)" if axis == "elements" else
                        f"{_unit(bad)} ({axis} axis)")
                     + f"; e.g. {(first.get('message') or '')[:160]}"
                     + ("" if traced is None else _traced_note(traced, aten, split_dim, action))),
            provenance={"source": f"kernelaudit sweep, run store {store.path.name}", "date": m.get("started"),
                        "git": m.get("git"), "device": (m.get("device") or {}).get("name"),
                        **({"devices": devices} if len(devices) > 1 else {}), "ran_on": ran_on,
                        "fault_model": fault_model, "cases": sorted(c.id for c, _ in bad)[:12]},
        ))
    return rules, notes


def _traced_note(traced, aten: tuple, split_dim: int | None, action: str) -> str:
    """What a rule's explanation says of its traced entry point: why no split dim, and
    whether the call is refused (``raise``) or fixed by the entry's own fix."""
    where = ", ".join(aten) if aten else f"the engine's {traced.aten[0]}"
    note = f"; entry point {where} found by tracing the op at a tiny size"
    if aten and split_dim is None and traced.reason:
        how = "raise" if action == "raise" else "fixed by the entry's own fix, no split dim"
        note += f" ({how}: {traced.reason[:200]})"
    return note


def write_rules(store: RunStore, path: Path | None = None) -> Path:
    """Write the rules of ``store``'s findings to ``path`` (default ``rules.json`` in the
    store); a sweep with no wrong or error case writes an empty rule list."""
    from ..guard.rules import dump_rules
    rules, notes = rules_from_store(store)
    return dump_rules(rules, path or store.path / RULES_FILE, source=f"kernelaudit sweep {store.path.name}",
                      notes=notes)


def rules_line(path: Path) -> str:
    """What a written rules file holds, in a line: ``PATH (N rules, K to check on the device)``."""
    import json

    doc = json.loads(Path(path).read_text())
    unverified = sum(UNVERIFIED in n for n in doc.get("notes") or ())
    check = f", {unverified} whose fix to check on the device (its notes say why)" if unverified else ""
    n = len(doc.get("rules") or ())
    return f"{path} ({n} rule{'' if n == 1 else 's'}{check})"
