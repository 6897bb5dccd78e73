"""Demo: greedy generation gives the same tokens at batch 1 and batch 64 under
``kernelaudit.repro.deterministic()``.

A small character-level transformer (``kernelaudit.repro.tinylm``) is trained for a few
seconds on the project's sentiment sentences (``examples/data/sentiment.tsv``), then one
prompt is continued alone and as row ``--row`` of a batch of ``--batch`` prompts, with
the default kernels and under ``deterministic()``; the logits are compared bit for bit.

    python examples/repro_generate.py                               # CPU (interpreter): small batch
    python examples/repro_generate.py --device cuda --batch 64 --order mma --out gen.json

Exit code 0 when the deterministic run gives identical logits and tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from kernelaudit.repro import deterministic, tinylm

DATA = Path(__file__).with_name("data") / "sentiment.tsv"


def run(device: str, batch: int, row: int, new_tokens: int, order: str, steps: int) -> dict:
    text = " ".join(line.split("\t", 1)[-1] for line in DATA.read_text().splitlines() if line.strip())
    cfg = tinylm.LMConfig(vocab=128, length=64, dim=64, heads=4, hidden=256, layers=2)
    t0 = time.perf_counter()
    model = tinylm.train(text, cfg, steps=steps).to(device)
    train_s = time.perf_counter() - t0
    data = tinylm.encode(text, cfg.vocab)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(data) - 17, (batch,), generator=g)
    prompts = torch.stack([data[s:s + 16] for s in starts.tolist()]).to(device)   # [batch, 16]
    res = {"device": device, "batch": batch, "row": row, "order": order, "train_seconds": round(train_s, 1)}
    for name, ctx in (("default", torch.inference_mode), ("deterministic", lambda: deterministic(order))):
        with ctx(), torch.inference_mode():
            alone_logits = model(prompts[row:row + 1])[0]
            batch_logits = model(prompts)[row]
            one = tinylm.generate(model, prompts[row:row + 1], new_tokens)[0]
            many = tinylm.generate(model, prompts, new_tokens)[row]
        res[name] = {"logits_identical": bool(torch.equal(alone_logits, batch_logits)),
                     "logits_max_abs_diff": float((alone_logits - batch_logits).abs().max()),
                     "tokens_identical": bool(torch.equal(one, many)),
                     "text_alone": bytes(one.tolist()).decode(errors="replace")}
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=None, help="default: 64 on cuda, 6 on cpu (the interpreter is slow)")
    p.add_argument("--row", type=int, default=None, help="the prompt's position in the batch (default: the last)")
    p.add_argument("--new-tokens", type=int, default=12)
    p.add_argument("--order", default="ieee", choices=("ieee", "mma"))
    p.add_argument("--steps", type=int, default=150, help="training steps")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    batch = a.batch or (64 if a.device.startswith("cuda") else 6)
    res = run(a.device, batch, batch - 1 if a.row is None else a.row, a.new_tokens, a.order, a.steps)
    for name in ("default", "deterministic"):
        r = res[name]
        print(f"{name:>13}: logits batch 1 == batch {batch} row {res['row']}: {r['logits_identical']} "
              f"(max |diff| {r['logits_max_abs_diff']:.3g}); tokens identical: {r['tokens_identical']}")
    print(f"continuation: {res['deterministic']['text_alone']!r}")
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    det = res["deterministic"]
    return 0 if det["logits_identical"] and det["tokens_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
