"""Which ops keep their bits at every batch size, as torch runs them and under
``kernelaudit.deterministic()``: ``kernelaudit repro op``'s probes over a list of ops.

For each op, dtype and impl: run to run, batch size (row 0 of ``fn(x[:M])`` against
``fn(x[:1])[0]``) and batch position, as :func:`kernelaudit.repro.check` does. Writes a JSON
record of every report, a markdown table (where each probe first diverges, the worst
ULPs) and a figure (survey.png: one cell per op and dtype / impl), so the figure "cuBLAS bf16 diverges from M = 64 on, the deterministic kernels
never" extends to the norms, softmaxes, attention and reductions.

    python benchmarks/repro_ops_survey.py --device cuda --out DIR          # K = N = 4096
    python benchmarks/repro_ops_survey.py --device cpu -k 64 -n 32 --batch-sizes 1,2,8 --out DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

#: The ops deterministic() replaces (probed as torch runs them and under ieee) and ops it
#: leaves to torch (probed as torch runs them only: under a mode they would be the same).
REPLACED = ("mm", "linear", "bmm", "softmax", "log_softmax", "layer_norm", "rms_norm", "attention")
TORCH_ONLY = ("sum", "mean", "torch.logsumexp(dim=-1)", "torch.cumsum(dim=-1)", "torch.var(dim=-1)",
              "torch.nn.functional.gelu", "torch.sort(dim=-1)")


def survey(ops, dtypes, impls, k, n, batch_sizes, runs, device, seed=0, budget_s=None, on_report=None):
    """One report per (op, dtype, impl) as JSON-ready dicts, in order; stops starting new
    ones once ``budget_s`` seconds have passed (the rest are left out, not guessed).
    ``on_report(rows)`` is called after each report (to save what is done so far)."""
    from kernelaudit.repro.invariance import check
    from kernelaudit.repro.subjects import op_subject

    t0 = time.perf_counter()
    rows = []
    for op in ops:
        for dtype in dtypes:
            for impl in impls if op in REPLACED else ("torch",):
                if budget_s is not None and time.perf_counter() - t0 > budget_s:
                    return rows
                t = time.perf_counter()
                # attention's samples are [rows, 2, N, K]: N tokens of K, kept small
                kk, nn = (min(k, 128), min(n, 256)) if op == "attention" else (k, n)
                fn, x = op_subject(op, impl, dtype, kk, nn, max(batch_sizes), device, seed)
                r = check(fn, x, subject=f"{op} {dtype} [{impl}]", batch_sizes=batch_sizes, runs=runs)
                got = r.to_json()
                got["out_dtype"] = got.pop("dtype")   # the output's; "dtype" is the samples'
                rows.append(got | {"op": op, "dtype": dtype, "impl": impl, "k": kk, "n": nn,
                                   "seconds": round(time.perf_counter() - t, 3)})
                if on_report is not None:
                    on_report(rows)
                del fn, x
    return rows


def _worst(row, probe):
    bad = [p for p in row["probes"] if p["probe"] == probe and not p["equal"]]
    if not bad:
        return "same bits"
    start = row["diverges_from"][probe]
    ulps = max(p["max_ulps"] for p in bad)
    where = f"from {start}" if start is not None else "at " + ", ".join(str(p["setting"]) for p in bad)
    return f"{where}: {ulps} ULP"


def table(rows) -> str:
    """Markdown: one line per report."""
    out = ["| op | dtype | impl | run to run | batch size | position |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["error"]:
            out.append(f"| `{r['op']}` | {r['dtype']} | {r['impl']} | could not judge: {r['error'][:80]} | | |")
            continue
        out.append(f"| `{r['op']}` | {r['dtype']} | {r['impl']} | " +
                   " | ".join(_worst(r, p) for p in ("run", "batch", "position")) + " |")
    return "\n".join(out) + "\n"


def figure(rows, path: Path, title: str) -> None:
    """One cell per op (rows) and dtype / impl (columns): green where every probe gave the
    same bits, red where the batch-size or position probe diverged (the batch size it
    diverges from written in), orange where only run to run did, grey where it could not
    be judged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(r["op"] for r in rows))
    cols = list(dict.fromkeys((r["dtype"], r["impl"]) for r in rows))
    colour = {"same": "#4caf50", "batch": "#e53935", "run": "#fb8c00", "error": "#9e9e9e"}
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(cols), 0.8 + 0.32 * len(ops)))
    for r in rows:
        y, x = ops.index(r["op"]), cols.index((r["dtype"], r["impl"]))
        if r["error"]:
            kind, text = "error", "?"
        elif r["invariant"]:
            kind, text = "same", ""
        elif any(not p["equal"] for p in r["probes"] if p["probe"] != "run"):
            start = r["diverges_from"]["batch"] or r["diverges_from"]["position"]
            kind, text = "batch", "" if start is None else f"M>={start}" if r["diverges_from"]["batch"] else f"p>={start}"
        else:
            kind, text = "run", "run"
        ax.add_patch(plt.Rectangle((x, y), 0.95, 0.9, color=colour[kind]))
        ax.text(x + 0.47, y + 0.45, text, ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(ops), 0)
    ax.set_xticks([i + 0.47 for i in range(len(cols))], [f"{d}\n{i}" for d, i in cols], fontsize=7)
    ax.set_yticks([i + 0.45 for i in range(len(ops))], ops, fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ops", default=",".join(REPLACED + TORCH_ONLY),
                    help="comma list: names of kernelaudit.repro.subjects.OPS or dotted torch functions "
                         "(no commas inside: use the defaults' forms)")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--impls", default="torch,ieee")
    ap.add_argument("-k", type=int, default=4096)
    ap.add_argument("-n", type=int, default=4096)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128,256,512,1024")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=None, help="start no report after this many seconds")
    ap.add_argument("--out", required=True, help="a folder: survey.json, survey.md and survey.png")
    a = ap.parse_args(argv)
    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("repro_ops_survey: no CUDA device", file=sys.stderr)
        return 3
    from kernelaudit.errors import InvalidArgument
    from kernelaudit.repro.subjects import check_op

    ops = [o for o in a.ops.split(",") if o]
    try:
        for op in ops:
            check_op(op)
    except InvalidArgument as e:
        print(f"repro_ops_survey: {e}", file=sys.stderr)
        return 2
    sizes = [int(v) for v in a.batch_sizes.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else platform.processor() or "cpu",
            "torch": torch.__version__, "cuda": torch.version.cuda, "k": a.k, "n": a.n, "batch_sizes": sizes,
            "runs": a.runs, "date": time.strftime("%Y-%m-%d")}

    def save(rows):  # after every report: a run cut short keeps what it judged
        (out / "survey.json").write_text(json.dumps(meta | {"reports": rows}, indent=1) + "\n")

    rows = survey(ops, a.dtypes.split(","), a.impls.split(","), a.k, a.n, sizes,
                  a.runs, a.device, budget_s=a.budget_s, on_report=save)
    save(rows)
    md = table(rows)
    (out / "survey.md").write_text(f"{meta['device']}, torch {meta['torch']}, K = {a.k}, N = {a.n}\n\n" + md)
    figure(rows, out / "survey.png", f"same bits at every batch size?\n{meta['device']}, torch {meta['torch']}, "
           f"K = {a.k}, N = {a.n}")
    print(md)
    return 1 if any(r["judged"] and not r["invariant"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
