"""Demo: a small transformer sentiment classifier, one oversized batch, the MPS bug, the guard.

The project's own model and data: a 2-layer transformer classifier (positive /
negative / neutral) trained here in a few seconds on ``examples/data/sentiment.tsv``
(written by ``examples/make_sentiment_data.py``). It is then run on one batch large
enough that its attention scores ``(batch, heads, L, L)`` cross the (scaled) 2^32
threshold, three ways:

1. honest backend (the reference predictions);
2. the ``mps`` fault model, no guard: MPS's tiled bmm reads the transposed keys as
   packed (rule A) and the predictions are corrupted, collapsing onto one class;
3. the ``mps`` fault model with ``kernelaudit.guard`` in ``fix`` mode: no prediction
   changes.

Run it (CPU, a few seconds; 2^32 becomes 2^20)::

    python examples/guard_demo.py
    python examples/guard_demo.py --scale 20 --out docs/results/guard_demo_cpu.json --figure docs/guard_demo.png

On a GPU, at the real threshold (the fault model emulates MPS on CUDA)::

    python examples/guard_demo.py --device cuda --scale 32 --dtype bfloat16 --out guard_demo_h200.json

The same what-if works on any program: ``kernelaudit run --fault-model mps --scale 20
-- python examples/guard_demo.py --plain`` runs the demo's big batch under whatever
guard ``kernelaudit run`` installs (about a minute: the training runs under the
what-if's dispatch modes too).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = Path(__file__).with_name("data") / "sentiment.tsv"
LABELS = ("negative", "neutral", "positive")
PAD, UNK = 0, 1


# -- data ---------------------------------------------------------------------------------
class Vocab:
    """Word -> id, built from the training sentences (0 = padding, 1 = unknown)."""

    def __init__(self, sentences):
        words = sorted({w for s in sentences for w in s.split()})
        self.ids = {w: i + 2 for i, w in enumerate(words)}

    def __len__(self) -> int:
        return len(self.ids) + 2

    def encode(self, sentences, length: int) -> torch.Tensor:
        # ids: [N, length], padded with PAD
        out = torch.full((len(sentences), length), PAD, dtype=torch.long)
        for i, s in enumerate(sentences):
            ids = [self.ids.get(w, UNK) for w in s.split()][:length]
            out[i, : len(ids)] = torch.tensor(ids)
        return out


def load(path: Path = DATA):
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    return [t for _, t in rows], torch.tensor([LABELS.index(lab) for lab, _ in rows])


# -- model ----------------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-norm transformer block; attention written out as models do ("eager"), or SDPA."""

    def __init__(self, dim: int, heads: int, hidden: int, sdpa: bool) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        h = self.heads
        # q, k, v: [B, heads, L, D/heads]
        q, k, v = self.qkv(self.norm1(x)).view(B, L, 3, h, D // h).permute(2, 0, 3, 1, 4)
        bias = torch.zeros(B, 1, 1, L, dtype=x.dtype, device=x.device).masked_fill(~mask[:, None, None, :], -1e4)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // h)  # [B, heads, L, L]
            a = torch.matmul(torch.softmax(scores + bias, dim=-1), v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, L, D))
        return x + self.ff(self.norm2(x))


class Classifier(nn.Module):
    """Embedding + positions, transformer blocks, mean pooling, linear head."""

    def __init__(self, vocab: int, length: int, dim: int = 32, heads: int = 8, hidden: int = 64,
                 layers: int = 2, sdpa: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.zeros(length, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, hidden, sdpa) for _ in range(layers))
        self.head = nn.Linear(dim, len(LABELS))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids != PAD                      # [B, L]
        x = self.emb(ids) + self.pos
        for blk in self.blocks:
            x = blk(x, mask)
        m = mask.unsqueeze(-1).to(x.dtype)
        return self.head((x * m).sum(1) / m.sum(1).clamp_min(1))


#: Tokens per sentence (the longest sentence has 10 words; padding makes attention bigger).
LENGTH = 24
HEADS = 8


def train(seed: int = 0, epochs: int = 40, sdpa: bool = False, verbose: bool = False):
    """Train on 80% of the set; returns (model, vocab, test accuracy). A few seconds on CPU."""
    texts, labels = load()
    n_train = int(0.8 * len(texts))
    vocab = Vocab(texts[:n_train])
    ids = vocab.encode(texts, LENGTH)
    torch.manual_seed(seed)
    model = Classifier(len(vocab), LENGTH, heads=HEADS, sdpa=sdpa)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        perm = torch.randperm(n_train, generator=g)
        for i in range(0, n_train, 32):
            idx = perm[i:i + 32]
            loss = F.cross_entropy(model(ids[idx]), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if verbose and epoch % 10 == 9:
            print(f"  epoch {epoch + 1}: loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        acc = (model(ids[n_train:]).argmax(-1) == labels[n_train:]).float().mean().item()
    return model, vocab, acc


# -- the oversized batch -------------------------------------------------------------------------
def scores_per_sample() -> int:
    return HEADS * LENGTH * LENGTH


def batch_for(bits: int, margin: float = 1.5) -> int:
    """A batch whose attention scores have ``margin`` x 2^bits elements (1.5: a third past it)."""
    return int(2**bits * margin) // scores_per_sample() + 1


def big_batch(vocab: Vocab, n: int) -> torch.Tensor:
    """n sentences: the held-out sentences repeated (ids [n, LENGTH])."""
    texts, _ = load()
    test = vocab.encode(texts[int(0.8 * len(texts)):], LENGTH)
    reps = -(-n // len(test))
    return test.repeat(reps, 1)[:n]


def predict(model, ids, device, dtype, chunk: int | None = None) -> torch.Tensor:
    with torch.inference_mode():
        if chunk is None:
            return model(ids.to(device)).argmax(-1).cpu()
        return torch.cat([model(ids[i:i + chunk].to(device)).argmax(-1).cpu() for i in range(0, len(ids), chunk)])


def distribution(pred: torch.Tensor) -> dict:
    c = Counter(pred.tolist())
    return {LABELS[i]: round(c.get(i, 0) / len(pred), 4) for i in range(len(LABELS))}


def run(scale: int = 20, device: str = "cpu", dtype: str = "float32", batch: int | None = None,
        sdpa: bool = False, seed: int = 0, verbose: bool = True) -> dict:
    """Train, then run the oversized batch honest / faulty / faulty + guard. Returns the figures."""
    from kernelaudit import guard
    from kernelaudit.faults import make_fault_model
    from kernelaudit.faults.mps import _math_attention_only
    from kernelaudit.thresholds import Thresholds

    t0 = time.perf_counter()
    model, vocab, acc = train(seed=seed, sdpa=sdpa)
    train_s = time.perf_counter() - t0
    dt = getattr(torch, dtype)
    model = model.to(device=device, dtype=dt)
    n = batch or batch_for(scale)
    ids = big_batch(vocab, n)
    th = Thresholds(scale)
    say = print if verbose else (lambda *a, **k: None)
    say(f"trained in {train_s:.1f}s, held-out accuracy {acc:.3f}; batch {n}: attention scores "
        f"{n * scores_per_sample()} elements vs 2^32 -> 2^{scale} = {th.t32}")

    with _math_attention_only():
        # reference: the same batch in pieces far below every threshold
        honest = predict(model, ids, device, dt, chunk=max(1, th.t31 // (4 * scores_per_sample())))
        with make_fault_model("mps", th) as fm:
            faulty = predict(model, ids, device, dt)
        fault_calls = dict(fm.stats.changed)
        t = time.perf_counter()
        with guard.guarding("fix", fault_model="mps", scale=scale) as g:
            fixed = predict(model, ids, device, dt)
        guarded_s = time.perf_counter() - t
        stats = g.stats()

    res = {
        "scale": scale, "device": device, "dtype": dtype, "batch": n, "attention": "sdpa" if sdpa else "eager",
        "scores_elements": n * scores_per_sample(), "threshold_2p32": th.t32, "heldout_accuracy": round(acc, 4),
        "train_seconds": round(train_s, 2),
        "honest": {"distribution": distribution(honest)},
        "faulty": {"corrupted_fraction": round((faulty != honest).float().mean().item(), 4),
                   "distribution": distribution(faulty), "fault_calls_changed": fault_calls},
        "guarded": {"corrupted_fraction": round((fixed != honest).float().mean().item(), 4),
                    "distribution": distribution(fixed), "guard": stats.to_json(),
                    "seconds": round(guarded_s, 3)},
        "torch": torch.__version__, "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    if device.startswith("cuda"):
        res["gpu"] = torch.cuda.get_device_name()
    say(f"honest:           {res['honest']['distribution']}")
    say(f"mps fault model:  {res['faulty']['corrupted_fraction']:.1%} of predictions corrupted, "
        f"{res['faulty']['distribution']} (calls changed: {fault_calls})")
    say(f"  + guard (fix):  {res['guarded']['corrupted_fraction']:.1%} corrupted, {res['guarded']['distribution']}")
    say(f"  {stats.summary()}")
    return res


def figure(res: dict, path: Path) -> None:
    """Class distribution honest / faulty / guarded, as a grouped bar chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [("honest", "honest backend"),
            ("faulty", f"mps fault model\n{res['faulty']['corrupted_fraction']:.0%} corrupted"),
            ("guarded", f"mps + guard (fix)\n{res['guarded']['corrupted_fraction']:.0%} corrupted")]
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.26
    for i, label in enumerate(LABELS):
        vals = [res[k]["distribution"][label] for k, _ in runs]
        ax.bar([j + (i - 1) * width for j in range(len(runs))], vals, width, label=label)
    ax.set_xticks(range(len(runs)), [t for _, t in runs])
    ax.set_ylabel("fraction of predictions")
    ax.set_ylim(0, 1)
    ax.legend(frameon=False, ncols=3, loc="upper center")
    ax.set_title(f"batch {res['batch']}, attention scores {res['scores_elements']:,} > 2^{res['scale']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plain(scale: int, device: str) -> None:
    """Just the big batch, whatever backend and guard the process has (for ``kernelaudit run``)."""
    model, vocab, _ = train()
    ids = big_batch(vocab, batch_for(scale))
    pred = predict(model.to(device), ids, device, torch.float32)
    print("distribution:", distribution(pred))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=int, default=20, help="the fault model's 2^32 becomes 2^SCALE (32: real)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--batch", type=int, default=None, help="default: just past the threshold")
    p.add_argument("--sdpa", action="store_true", help="attention through F.scaled_dot_product_attention")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    p.add_argument("--figure", type=Path, default=None, help="write a bar chart PNG")
    p.add_argument("--plain", action="store_true", help="only run the big batch (for kernelaudit run)")
    a = p.parse_args(argv)
    if a.plain:
        plain(a.scale, a.device)
        return 0
    res = run(a.scale, a.device, a.dtype, a.batch, a.sdpa)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    if a.figure:
        figure(res, a.figure)
    ok = res["guarded"]["corrupted_fraction"] == 0 and res["faulty"]["corrupted_fraction"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
