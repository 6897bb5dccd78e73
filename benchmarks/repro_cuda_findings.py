"""Plain-torch reproductions of the wrong and error cases the H200 sweep found.

Each finding of ``kernelaudit sweep --device cuda --full`` is re-run here with nothing
but torch, so that it can be attached to an upstream report, together with a probe
that tells which size actually matters:

* ``arange``: ``torch.arange(N)`` for N > 2^32 on CUDA leaves the elements from index
  2^32 on unwritten (pytorch/pytorch#197673). Checked in int64, where every value is exact.
* ``sdpa_bwd``: the backward of ``scaled_dot_product_attention`` in fp16/bf16 raises
  ``mha_graph.execute(...).is_good()`` at batch 65536 (cuDNN). The probe keeps the
  batch at 65536 and shrinks the sequence, so the score count falls far below 2^32:
  if it still raises, the batch size is the limit, not the 2^32 scores.

    python benchmarks/repro_cuda_findings.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F


def arange(n: int) -> dict:
    x = torch.arange(n, dtype=torch.int64, device="cuda")
    t32 = 2**32
    tail = x[t32:]
    want = torch.arange(t32, n, dtype=torch.int64, device="cuda")
    wrong = int((tail != want).sum())
    res = {"n": n, "x[2^32-1]": int(x[t32 - 1]), "x[2^32]": int(x[t32]), "x[-1]": int(x[-1]),
           "wrong_from_2^32_on": wrong, "of": n - t32, "head_correct": bool(x[:1024].eq(torch.arange(1024, device="cuda")).all())}
    del x, tail, want
    torch.cuda.empty_cache()
    return res


def sdpa_bwd(batch: int, seq: int, dtype: torch.dtype, dim: int = 64) -> dict:
    q, k, v = (torch.randn(batch, 1, seq, dim, dtype=dtype, device="cuda", requires_grad=True) for _ in range(3))
    res = {"batch": batch, "seq": seq, "dtype": str(dtype).replace("torch.", ""), "scores": batch * seq * seq}
    try:
        out = F.scaled_dot_product_attention(q, k, v)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        res["result"] = "ok"
    except RuntimeError as e:
        res["result"] = "raised: " + str(e).strip().splitlines()[0][:160]
    del q, k, v
    torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    res = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d", time.gmtime())}
    res["arange"] = [arange(2**32 + 5), arange(2**32 + 16384)]
    res["sdpa_bwd"] = [sdpa_bwd(b, s, dt) for dt in (torch.float16, torch.bfloat16)
                       for b, s in ((65535, 256), (65536, 256), (65536, 16), (65536, 1))]
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
