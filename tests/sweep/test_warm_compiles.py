"""Warm compiles: calibration workers run each matmul case at a small batch of the same
residue mod 16 so that Triton compiles, side by side, the judge's specialisations the
cases will launch (``KERNELAUDIT_WARM_COMPILES``)."""

from __future__ import annotations

from kernelaudit import GridSpec, run_sweep
from kernelaudit.sweep.cases import calibration_batch, grid, warm_batch


def test_a_case_and_its_warm_run_launch_the_same_triton_specialisations(monkeypatch):
    """The premise, under the interpreter: every (kernel, constexprs, specialised integer and
    pointer pattern) a judged case launches, its warm run launched too. The integers Triton
    keys on (divisible by 16, equal to 1) are read as Triton reads them, arguments it was
    told not to specialise left out. An addmm with A transposed: its gradient's row stride
    is the row count, which grows with the batch count (calibration's batch gives it
    another pattern: the case's launches are not all calibration's)."""
    import torch
    import triton.runtime.interpreter as interp

    from kernelaudit.config import FUSED_COMPARE, FUSED_FREIVALDS, FUSED_SUMMARY
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated

    for knob in (FUSED_FREIVALDS, FUSED_COMPARE, FUSED_SUMMARY):
        monkeypatch.setenv(knob.name, "1")   # the Triton judge kernels, as on CUDA
    seen: list = []
    real = interp.InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        code = self.fn.__code__
        skip = set(self.kwargs.get("do_not_specialize") or ())
        key = []
        for name, a in zip(code.co_varnames[:code.co_argcount], args):
            if name in skip:
                continue
            if isinstance(a, bool) or a is None:
                key.append((name, a))
            elif isinstance(a, int):
                key.append((name, "1" if a == 1 else "16" if a % 16 == 0 else "-"))
            elif isinstance(a, torch.Tensor):
                key.append((name, str(a.dtype), a.data_ptr() % 16 == 0))
        seen.append((self.fn.__name__, tuple(sorted(map(str, kwargs.items()))), tuple(key)))
        return real(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(interp.InterpretedFunction, "run", run)
    case = next(c for c in grid(GridSpec(ops=("addmm",), dtypes=("float32",), layouts=("aT",), directions=("bwd",),
                                          thresholds=("2^32",), positions=("above",), scale=14)))
    cal = case.with_batch(calibration_batch(case), threshold="cal", position="below")
    warm = case.with_batch(warm_batch(case), threshold="cal", position="below")
    assert warm.batch < case.batch and warm.batch % 16 == case.batch % 16 != cal.batch % 16
    tol = calibrated(execute(cal, "cpu", tolerances=None).worst, case.dtype)
    seen.clear()
    execute(cal, "cpu", tolerances=None)
    by_calibration = set(seen)
    seen.clear()
    assert execute(case, "cpu", tolerances=tol).verdict.status.value == "ok"
    by_case = set(seen)
    seen.clear()
    execute(warm, "cpu", tolerances=None)   # as a warm job runs: no tolerances
    by_warm = set(seen)
    assert by_case and by_case <= by_warm
    assert not by_case <= by_calibration   # what the warm run is for


def test_warm_compiles_change_no_tolerance_or_verdict_and_are_counted_apart(tmp_path, monkeypatch):
    """Warm runs (``KERNELAUDIT_WARM_COMPILES``: each matmul case at a small batch of the
    same residue mod 16, side by side with calibration) only make Triton compile: the
    tolerances and verdicts are those of a run without them, no tolerance key is a warm
    run's, and the segment counts them."""
    from kernelaudit.config import WARM_COMPILES

    spec = GridSpec(ops=("bmm", "add"), dtypes=("float32",), layouts=("contig", "aT"), thresholds=("2^32",),
                    positions=("below", "above"), scale=14)
    monkeypatch.setenv(WARM_COMPILES.name, "0")
    one = run_sweep(spec, tmp_path / "one", device="cpu", fault_model="mps", calibration_workers=2)
    monkeypatch.setenv(WARM_COMPILES.name, "1")
    two = run_sweep(spec, tmp_path / "two", device="cpu", fault_model="mps", calibration_workers=2)
    m1, m2 = one.store.manifest(), two.store.manifest()
    assert m1["tolerances"] and m1["tolerances"] == m2["tolerances"]
    verdicts = lambda res: {k: (r["verdict"]["status"], r["verdict"]["metric"], r["verdict"]["value"])  # noqa: E731
                            for k, r in res.store.latest().items()}
    assert verdicts(one) == verdicts(two) and "wrong" in {s for s, _, _ in verdicts(two).values()}
    seg1, seg2 = one.store.manifest()["segments"][0], two.store.manifest()["segments"][0]
    assert "warm_compiles" not in seg1
    cal = {(c.key, c.batch) for c in (c.with_batch(calibration_batch(c), threshold="cal", position="below")
                                      for c in grid(spec))}
    warm_runs = {(w.key, w.batch) for w in (c.with_batch(warm_batch(c), threshold="cal", position="below")
                                            for c in grid(spec) if c.op == "bmm")} - cal
    assert seg2["warm_compiles"]["jobs"] == len(warm_runs) > 0   # bmm's, once each; add has none
    assert not any(k.startswith("warm:") for k in two.store.manifest()["tolerances"])


def test_a_warm_batch_keeps_the_residue_mod_16_far_below_the_limits():
    """Triton specialises integers on divisibility by 16 and on 1: the warm batch has the
    case's residue, is 1 only for a case of one batch, and is a calibration-sized batch."""
    spec = GridSpec(ops=("bmm", "addmm", "matmul4d"), dtypes=("float32",), thresholds=("2^31", "2^32"),
                    positions=("below", "above"), axes=("elements", "dim", "bytes"))
    cases = grid(spec)
    assert cases
    for c in cases:
        b = warm_batch(c)
        assert b is not None and b % 16 == c.batch % 16, (c.id, c.batch, b)
        assert (b == 1) == (c.batch == 1) and b <= 33, (c.id, c.batch, b)
    one = next(c for c in cases if c.batch > 17).with_batch(1)
    assert warm_batch(one) == 1




def test_warm_runs_cover_only_the_cases_a_segment_reaches_soon(monkeypatch):
    from kernelaudit.sweep import schedule
    from kernelaudit.sweep.cases import GridSpec, grid

    todo = grid(GridSpec(ops=("bmm", "add"), dtypes=("float32",), layouts=("contig",), thresholds=("2^31", "2^32"),
                         positions=("below", "above"), scale=16))   # 12: no batch far enough below
    everything = schedule._warm_jobs(todo, {})
    assert everything and all(w.spec.bilinear is not None for w in everything.values())
    monkeypatch.setattr(schedule, "WARM_AHEAD", 2)
    ahead = schedule._warm_jobs(todo, {})
    assert 0 < len(ahead) <= 2 < len(everything)
    assert {(w.op, w.direction) for w in ahead.values()} <= {(c.op, c.direction) for c in todo[:2]}
