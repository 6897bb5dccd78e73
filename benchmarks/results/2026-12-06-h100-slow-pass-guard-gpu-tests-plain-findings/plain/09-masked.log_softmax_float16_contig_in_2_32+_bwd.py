import json, sys
import torch
dev, dt = 'cuda', torch.float16
x0 = (torch.rand((858993465, 5), device=dev, dtype=dt) * 2 - 1).requires_grad_()

def call(x0):
    return torch.masked.log_softmax(x0.movedim(0, 1), 0, mask=None)

xs, B, batched, grads = [x0], 15618063, [True], [True]
outs_at = [(0, 1)]
cb = max(1, 16777216 // 275)  # whole batches a chunk
tol = 0.01

def picked(out):
    out = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    return [out[i] for i, _ in outs_at]

res = {'result': 'ok', 'wrong': 0, 'compared': 0, 'first_bad': None, 'max_abs_diff': 0.0}

def compare(got, want, base):
    got, want = got.detach().double(), want.detach().double()
    bad = ~(((got - want).abs() <= tol * (1 + want.abs())) | (got.isnan() & want.isnan()))
    res['compared'] += got.numel()
    diff = (got - want).abs().nan_to_num(float('inf'))
    res['max_abs_diff'] = max(res['max_abs_diff'], float(diff.max()) if diff.numel() else 0.0)
    nbad = int(bad.sum())
    if nbad and res['first_bad'] is None:
        res['first_bad'] = base + int(bad.flatten().nonzero()[0])
    res['wrong'] += nbad

try:
    big = picked(call(x0))
    ups = [torch.rand_like(y) * 2 - 1 for y in big]
    torch.autograd.backward(big, ups)
    torch.cuda.synchronize()
except Exception as e:  # the call's own error is the finding
    print(json.dumps({'result': 'raised', 'error': f'{type(e).__name__}: ' + str(e).strip()[:300]}))
    sys.exit(0)

for b0 in range(0, B, cb):
    b1 = min(B, b0 + cb)
    rows = [x.shape[0] // B if bat else None for x, bat in zip(xs, batched)]
    part = [x.detach()[b0 * r:b1 * r] if r else x.detach() for x, r in zip(xs, rows)]
    part = [p.requires_grad_() if gr else p for p, gr in zip(part, grads)]
    small = picked(call(*part))
    sl = [u.narrow(d, b0 * (u.shape[d] // B), (b1 - b0) * (u.shape[d] // B))
          for (i, d), u in zip(outs_at, ups)]
    torch.autograd.backward(small, sl)
    for x, p, r, gr in zip(xs, part, rows, grads):
        if gr and (x.grad is None) != (p.grad is None):  # a gradient only one call gives
            res['wrong'] += 1
        elif gr and x.grad is not None:
            compare(x.grad[b0 * r:b1 * r], p.grad, b0 * r * (x.numel() // x.shape[0]))
if res['wrong']:
    res['result'] = 'wrong'
print(json.dumps(res))
