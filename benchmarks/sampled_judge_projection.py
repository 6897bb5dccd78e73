"""What ``--mode sampled`` would have saved on a recorded grid, and which of its findings
it would still have seen: a projection from a run store's records, not a run.

For every judged case whose outputs are all batched (the cases ``sampled`` applies to:
no shared gradient, no fused matmul check, no whole-tensor or metamorphic judge) it
rebuilds the case's chunks as the CUDA judge cut them (2^27 elements), asks
:func:`kernelaudit.sweep.judge.sampling.sampled_chunks` which it would keep, and scales
the recorded judge time by the share kept (chunks cost alike: the same op or reference
on equal slices). For every wrong case it says whether the chunk of its first or its
last bad batch is kept: then the sampled judge sees the finding (a lower bound: bad
batches in between are not recorded).

It also replays the grid on N devices with and without those savings
(``devices_projection.py``).

    python benchmarks/sampled_judge_projection.py runs/h200 --out DIR/sampled_projection.json
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit  # noqa: E402
from devices_projection import projection  # noqa: E402

CUDA_CHUNK = 2**27


def _meta(p):
    import torch

    return torch.empty(max(p.storage_numel, 1), dtype=p.dtype, device="meta").as_strided(p.shape, p.strides, p.offset)


def chunks_of(case):
    """``(kept, total, step)`` of the sampled judge for ``case``, or None where it judges
    every chunk (module docstring)."""
    from kernelaudit.sweep.judge.operands import placed_operands
    from kernelaudit.sweep.judge.reference import chunk_batches, forward_outputs
    from kernelaudit.sweep.judge.sampling import sampled_chunks

    spec = case.spec
    if spec.call is None or "global" in spec.extra or "metamorphic" in spec.extra or spec.bilinear is not None:
        return None  # factories, whole-tensor and metamorphic judges, the fused matmul checks
    placed = placed_operands(case)
    if case.direction == "fwd":
        outs = forward_outputs(case, placed)
        if outs is None:
            return None
        rows = spec.out_rows(case.series, case.thresholds)
    else:
        grads = [p for p in placed if p.operand.grad and p.dtype.is_floating_point]
        if not grads or any(not p.batched for p in grads):
            return None  # a shared gradient sums every batch
        outs, rows = [_meta(p) for p in grads], [p.operand.rows_per_batch for p in grads]
    if any(r is None for r in rows[:len(outs)]):
        return None
    step = chunk_batches(case, placed, outs, CUDA_CHUNK)
    total = -(-case.batch // step)
    if total <= 1:
        return None
    return sampled_chunks(case, placed, outs, rows, step), total, step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", help="a run store (manifest.json, verdicts.jsonl)")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    ap.add_argument("--devices", type=lambda t: [int(v) for v in t.split(",")], default=[1, 4, 8],
                    help="device counts to project the grid's time on (default 1,4,8)")
    a = ap.parse_args(argv)
    from kernelaudit.sweep.cases import Case
    from kernelaudit.sweep.report.run import load_run

    run = load_run(a.store)
    judge_all = judge_eligible = judge_sampled = 0.0
    kept_chunks = all_chunks = eligible = 0
    by_op = collections.Counter()
    findings, failures = [], collections.Counter()
    saved = {}
    for rec in run.records:
        timing = (rec.verdict.details or {}).get("timing") or {}
        j = float(timing.get("judge_s") or 0.0)
        judge_all += j
        if rec.status.value not in ("ok", "wrong"):
            continue
        try:
            got = chunks_of(Case.from_json(rec.case))
        except Exception as e:  # noqa: BLE001 - an op this torch cannot build: counted, not guessed
            failures[type(e).__name__] += 1
            continue
        if got is None:
            continue
        kept, total, step = got
        eligible += 1
        kept_chunks += len(kept)
        all_chunks += total
        judge_eligible += j
        judge_sampled += j * len(kept) / total
        by_op[rec.op] += j * (1 - len(kept) / total)
        saved[rec.key] = j * (1 - len(kept) / total)
        if rec.status.value == "wrong":
            bb = rec.verdict.bad_batches
            starts = set(kept)
            seen = bb is not None and any(int(b) // step * step in starts for b in (bb.first, bb.last))
            findings.append({"id": rec.id, "seen": bool(seen), "kept": len(kept), "chunks": total,
                             "bad_batches": None if bb is None else [int(bb.first), int(bb.last), int(bb.count)]})
    result = {
        "store": str(a.store), "records": len(run.records), "judge_s_recorded": round(judge_all, 1),
        "eligible_cases": eligible, "eligible_judge_s": round(judge_eligible, 1),
        "sampled_judge_s_projected": round(judge_sampled, 1),
        "saved_s_projected": round(judge_eligible - judge_sampled, 1),
        "chunks_kept": kept_chunks, "chunks_all": all_chunks,
        "wrong_eligible": len(findings), "wrong_seen": sum(f["seen"] for f in findings),
        "wrong_unseen": [f for f in findings if not f["seen"]],
        "saved_s_by_op_top": [[op, round(s, 1)] for op, s in by_op.most_common(12)],
        "not_rebuilt": dict(failures),
        # the grid's time on N devices, recorded against sampled (devices_projection.py)
        "devices": {"recorded": projection(a.store, a.devices)["rows"],
                    "sampled": projection(a.store, a.devices, saved_s=saved)["rows"]},
    }
    emit(result, a.out)
    return 0 if math.isfinite(judge_sampled) else 3


if __name__ == "__main__":
    sys.exit(main())
