"""A small generative transformer (character level) to prove batch invariance end to end.

Pre-norm decoder: token + position embeddings, ``layers`` blocks of RMSNorm -> causal
SDPA attention -> RMSNorm -> GELU MLP, a final LayerNorm and an untied head. Every op a
real model spends its time in is here (linear, bmm via SDPA, softmax, both norms), and
nothing else. :func:`train` fits it to a text in seconds on a CPU; tests use it untrained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class LMConfig:
    vocab: int = 64
    length: int = 64
    dim: int = 64
    heads: int = 4
    hidden: int = 256
    layers: int = 2


class Block(nn.Module):
    def __init__(self, c: LMConfig) -> None:
        super().__init__()
        self.heads = c.heads
        self.norm1, self.norm2 = nn.RMSNorm(c.dim, eps=1e-6), nn.RMSNorm(c.dim, eps=1e-6)
        self.qkv = nn.Linear(c.dim, 3 * c.dim)
        self.proj = nn.Linear(c.dim, c.dim)
        self.up, self.down = nn.Linear(c.dim, c.hidden), nn.Linear(c.hidden, c.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        # q, k, v: [B, heads, L, D/heads]
        q, k, v = self.qkv(self.norm1(x)).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, L, D))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self, c: LMConfig = LMConfig()) -> None:
        super().__init__()
        self.config = c
        self.emb = nn.Embedding(c.vocab, c.dim)
        self.pos = nn.Parameter(torch.randn(c.length, c.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # ids: [B, L] -> logits [B, L, vocab]
        x = self.emb(ids) + self.pos[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def build(config: LMConfig = LMConfig(), *, seed: int = 0, dtype=torch.float32, device="cpu") -> TinyLM:
    """An untrained model with weights drawn from ``seed``."""
    torch.manual_seed(seed)
    return TinyLM(config).to(device=device, dtype=dtype).eval()


def encode(text: str, vocab: int) -> torch.Tensor:
    """Characters as ids (byte value modulo ``vocab``): any text fits any model."""
    return torch.tensor([b % vocab for b in text.encode()], dtype=torch.long)


def train(text: str, config: LMConfig = LMConfig(), *, steps: int = 200, seed: int = 0,
          batch: int = 32) -> TinyLM:
    """Next-character training on ``text`` (AdamW, CPU, a few seconds)."""
    model = build(config, seed=seed).train()
    data = encode(text, config.vocab)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    L = config.length
    for _ in range(steps):
        starts = torch.randint(0, len(data) - L - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + L] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + L + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.inference_mode()
def generate(model: TinyLM, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy continuation of equal-length prompts [B, L0] -> [B, L0 + new_tokens]
    (the whole prefix recomputed each step: no cache, so no cache layout to vary)."""
    ids = prompts
    for _ in range(new_tokens):
        nxt = model(ids[:, -model.config.length:])[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


def subject(device: str = "cpu", rows: int = 8, *, config: LMConfig = LMConfig(vocab=32, length=16, dim=32, heads=4,
                                                                              hidden=64, layers=2),
            prompt_length: int = 8, dtype=torch.float32):
    """The ``kernelaudit repro model`` entry point: (logits of a batch of prompts, prompts)."""
    model = build(config, dtype=dtype, device=device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab, (rows, prompt_length), generator=g).to(device)
    return model, ids
