"""all-MiniLM-L6-v2 quantized W8A8 by the project, through each implementation.

Weights per output channel, activations per token (dynamic), fp32 bias, bf16 output
(then fp32 for the rest of the model). :func:`evaluate` reports, for free and for
power-of-two scales:

* the cosine similarity of each sentence embedding to the fp32 model's;
* bit-equality of the embeddings across implementations, each in its own scale order
  (the Triton kernel ``act_first``, the torch path ``weight_first``, the reference
  ``product``; not ``exact``: with K = 1536 the int32 sums pass 2^24, so fp32(acc) rounds
  and the single rounding differs from every stepwise order, power-of-two scales or not);
* per linear layer, fed the same input, the output elements where the implementations
  disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .conformance import implementation
from .minilm import SENTENCES, MiniLM
from .quantize import quantize_rows
from .recipe import Recipe
from .reference import reference_gemm

# each implementation in the scale order a real one of its kind picks
PLAYERS = (("triton", "act_first"), ("torch", "weight_first"), ("reference", "product"))


def w8a8_linear(model: MiniLM, impl: str, recipe: Recipe, scales: str, *, record=None, tiles=None):
    """A ``linear(x, name)`` for :meth:`MiniLM.embed` doing the W8A8 GEMM in ``impl``;
    ``record`` (a dict) collects each layer's fp32 input."""
    cache = {}

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        if name not in cache:
            cache[name] = quantize_rows(model.weights[name + ".weight"], scales=scales)
        wq, sw = cache[name]
        if record is not None:
            record.setdefault(name, x.detach().clone())
        return gemm(impl, x, wq, sw, model.weights[name + ".bias"], recipe, scales, tiles).float()

    return linear


def gemm(impl, x, wq, sw, bias, recipe, scales, tiles=None) -> torch.Tensor:
    xq, sx = quantize_rows(x, scales=scales)
    if impl == "reference":
        return reference_gemm(xq, wq, sx, sw, bias=bias, recipe=recipe)
    kw = {"tiles": tiles} if impl == "triton" and tiles is not None else {}
    return implementation(impl)(xq, wq, sx, sw, bias=bias, recipe=recipe, **kw)


@dataclass
class ScalesResult:
    scales: str
    cosine: dict[str, list[float]] = field(default_factory=dict)  # player -> per sentence
    embeddings_bit_identical: bool = False
    layer_elements: int = 0
    layer_differing: dict[str, int] = field(default_factory=dict)  # "a vs b" -> elements


def evaluate(model: MiniLM | None = None, sentences=SENTENCES, *, players=PLAYERS, tiles=None) -> dict:
    """Cosine to fp32 and agreement across implementations, free vs power-of-two scales."""
    model = model or MiniLM.load()
    base = Recipe(out="bf16", bias="before_cast")
    ref32 = model.embed(sentences)
    out = {"sentences": len(sentences), "tokens": int(model.batch(sentences)[1].sum()),
           "players": [list(p) for p in players],
           "linears": len(model.linear_names()), "results": []}
    for scales in ("free", "pow2"):
        res = ScalesResult(scales)
        embs = {}
        inputs: dict[str, torch.Tensor] = {}
        for impl, order in players:
            r = base.but(scale_order=order)
            rec = inputs if not inputs else None
            embs[f"{impl}:{order}"] = e = model.embed(sentences, w8a8_linear(model, impl, r, scales, record=rec,
                                                                           tiles=tiles))
            res.cosine[f"{impl}:{order}"] = torch.nn.functional.cosine_similarity(e, ref32, dim=-1).tolist()
        vals = list(embs.values())
        res.embeddings_bit_identical = all(torch.equal(vals[0], v) for v in vals[1:])
        _layer_agreement(model, res, inputs, players, base, scales, tiles)
        out["results"].append(res.__dict__)
    return out


def _layer_agreement(model, res: ScalesResult, inputs, players, base, scales, tiles) -> None:
    """Each linear layer fed the first player's recorded input: outputs compared pairwise."""
    first = f"{players[0][0]}:{players[0][1]}"
    for name, x in inputs.items():
        wq, sw = quantize_rows(model.weights[name + ".weight"], scales=scales)
        ys = {f"{i}:{o}": gemm(i, x, wq, sw, model.weights[name + ".bias"], base.but(scale_order=o), scales, tiles)
              for i, o in players}
        res.layer_elements += ys[first].numel()
        for key, y in ys.items():
            if key != first:
                pair = f"{first} vs {key}"
                res.layer_differing[pair] = res.layer_differing.get(pair, 0) + int(
                    (y.view(torch.int16) != ys[first].view(torch.int16)).sum())
