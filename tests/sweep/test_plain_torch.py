"""A derived op's case as plain torch: the code runs on its own and makes the case's
call (shapes, storage layout, arguments, backward), for upstream reports."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.judge.operands import _as_tuple, device_inputs, placed_operands
from kernelaudit.sweep.ops.opinfo import derived_specs
from kernelaudit.sweep.ops.plain import plain_check, plain_torch


def _case(op: str, direction: str, scale: int, dtype: str | None = None, threshold: str = "2^32"):
    spec = derived_specs()[op] if op in derived_specs() else None
    return grid(GridSpec(ops=(op,), dtypes=(dtype or (spec.dtypes[0] if spec else "float32"),),
                         directions=(direction,), thresholds=(threshold,), positions=("above",),
                         layouts=("contig",), scale=scale))[0]


def _sample() -> list[tuple[str, str]]:
    """Every 8th op derived from a recipe, in name order, each of its directions."""
    names = sorted(n for n, s in derived_specs().items() if "recipe" in s.extra)[::8]
    return [(n, d) for n in names for d in derived_specs()[n].directions]


@pytest.mark.parametrize("op,direction", _sample())
def test_the_plain_torch_code_of_a_case_runs_and_makes_the_cases_outputs(op, direction):
    case = _case(op, direction, scale=10, threshold="2^31")
    code = plain_torch(case, device="cpu")
    if code is None:   # a function only the op database reaches, or a matrix domain
        assert case.spec.extra["recipe"]["fn"].startswith("opinfo:") or case.spec.extra["recipe"].get("domain")
        return
    assert "kernelaudit" not in code
    ns: dict = {}
    exec(compile(code, f"<{case.id}>", "exec"), ns)  # noqa: S102 - the code under test
    recipe = case.spec.extra["recipe"]
    if direction == "bwd":
        grads = [ns[f"x{i}"].grad for i, od in enumerate(recipe["operands"]) if od["grad"] and od["kind"] == "value"]
        assert any(g is not None for g in grads)
        return
    _, views = device_inputs(placed_operands(case), "cpu", grad=False)
    want = _as_tuple(case.spec.call(*views))
    out = ns["out"]
    flat = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
    got = [flat[o["index"]] for o in recipe["outs"]]
    got = [(torch.view_as_real(g) if g.is_complex() else g).movedim(o["dim"], 0) for g, o in zip(got, recipe["outs"])]
    assert [g.shape for g in got] == [w.shape for w in want]


def test_the_op_databases_own_functions_written_out_give_its_bits_and_render():
    from kernelaudit.sweep.ops.plain import OPINFO_CODE
    from kernelaudit.sweep.ops.recipe import make_call

    ops = [n for n, s in derived_specs().items() if s.extra.get("recipe", {}).get("fn") in OPINFO_CODE]
    assert "linalg.pinv.singular" in ops and len(ops) >= 5
    for op in ops:
        case = _case(op, "fwd", scale=10, threshold="2^31")
        recipe = case.spec.extra["recipe"]
        _, views = device_inputs(placed_operands(case), "cpu", grad=False)
        want = _as_tuple(case.spec.call(*views))
        written = eval(OPINFO_CODE[recipe["fn"]], {"torch": torch})  # noqa: S307 - the table under test
        got = make_call(recipe, fn=written)(*views)
        assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want)), op
        code = plain_torch(case, device="cpu")
        assert code is not None and "op = lambda" in code and "out = op(" in code, op


def test_reaching_the_op_databases_functions_leaves_the_backends_flags_settable():
    from kernelaudit.sweep.ops.recipe import resolve_fn

    resolve_fn("opinfo:linalg.pinv|singular")   # imports torch's test utilities
    was = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = not was    # raises where the import froze the flags
    torch.backends.cudnn.allow_tf32 = was


def test_the_softmin_finding_renders_the_transposed_storage_and_its_backward():
    # the full grid's softmin finding: float16, (5, n) moved from (n, 5) storage, past 2^32
    code = plain_torch(_case("nn.functional.softmin", "bwd", scale=32, dtype="float16"))
    assert "dev, dt = 'cuda', torch.float16" in code and "torch.rand((858993465, 5), device=dev, dtype=dt)" in code
    assert "torch.nn.functional.softmin(x0.movedim(0, 1), 0)" in code
    assert ".requires_grad_()" in code and "y.backward(" in code


def test_a_widened_interpolation_renders_its_widened_size():
    code = plain_torch(_case("nn.functional.interpolate.area", "fwd", scale=32))
    assert "torch.rand((349530, 3, 4096)" in code and "(3072,)" in code and "mode='area'" in code


def test_a_hand_specified_op_has_no_plain_torch_rendering():
    assert plain_torch(_case("bmm", "fwd", scale=12)) is None


def test_code_whose_shapes_differ_from_the_records_is_not_shown():
    # a store written where the op database sampled the op otherwise: no misleading code
    case = _case("nn.functional.softmin", "bwd", scale=32, dtype="float16")
    assert plain_torch(case, shapes=[[858993465, 5]]) is not None
    assert plain_torch(case, shapes=[[858993465, 6]]) is None


def _run_check(case, chunk_elements: int = 2**8) -> dict:
    code = plain_check(case, device="cpu", chunk_elements=chunk_elements)
    assert code is not None and "kernelaudit" not in code
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        exec(compile(code, f"<{case.id}>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the code under test
    return json.loads(buf.getvalue().strip().splitlines()[-1])


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_a_widened_samples_plain_check_counts_its_chunks_on_the_tensors_it_made(direction):
    # the recipe's per-batch count is the sample's before widening (360 for area's): a
    # chunk counted with it held the whole 2^32 call, and its float64 copy ran out of memory
    case = _case("nn.functional.interpolate.area", direction, scale=23, threshold="2^31")
    chunk = 2**18
    code = plain_check(case, device="cpu", chunk_elements=chunk)
    ns: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, f"<{case.id}>", "exec"), ns)  # noqa: S102 - the code under test
    per = max(t.numel() // case.batch for t in [ns["x0"], *ns["big"]])
    assert per > case.spec.extra["recipe"]["per_batch"]    # widened
    assert ns["per"] == per and ns["cb"] * per <= chunk and ns["cb"] < case.batch
    assert ns["res"]["result"] == "ok" and ns["res"]["compared"] > 0


@pytest.mark.parametrize("op,direction", _sample()[::3])
def test_the_plain_check_of_a_correct_op_finds_its_call_equal_to_the_call_in_chunks(op, direction):
    case = _case(op, direction, scale=10, threshold="2^31")
    if plain_check(case, device="cpu") is None:
        return
    res = _run_check(case)
    assert res["result"] == "ok" and res["compared"] > 0, res


def _planted(monkeypatch, fault: str, at: int):
    """softmin made to fail past ``at`` elements the way size faults do: its output's
    tail zeroed (which its gradient follows), or an error raised."""
    real = torch.nn.functional.softmin

    def softmin(x, *a, **k):
        if x.numel() <= at:
            return real(x, *a, **k)
        if fault == "raise":
            raise RuntimeError("CUDA error: invalid argument")
        keep = (torch.arange(x.numel()) < at).reshape(x.shape).to(x.dtype)
        return real(x, *a, **k) * keep

    monkeypatch.setattr(torch.nn.functional, "softmin", softmin)


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_the_plain_check_finds_a_call_wrong_past_a_size_and_names_its_first_bad_element(monkeypatch, direction):
    case = _case("nn.functional.softmin", direction, scale=10, threshold="2^31")
    n = case.batch * case.spec.extra["recipe"]["per_batch"]
    _planted(monkeypatch, "zero-tail", n // 2)   # the chunks (2^7 elements) stay below it
    res = _run_check(case, chunk_elements=2**7)
    assert res["result"] == "wrong" and res["wrong"] > 0 and res["first_bad"] is not None, res
    assert res["max_abs_diff"] > 0.01 and res["compared"] == n


def test_the_plain_check_reports_the_error_a_call_raises(monkeypatch):
    case = _case("nn.functional.softmin", "fwd", scale=10, threshold="2^31")
    _planted(monkeypatch, "raise", case.batch * case.spec.extra["recipe"]["per_batch"] // 2)
    res = _run_check(case)
    assert res == {"result": "raised", "error": "RuntimeError: CUDA error: invalid argument"}


def test_a_plain_check_run_under_the_guard_is_refused_where_a_rule_says_so(tmp_path, benchmark_script):
    """``repro_store_findings.py --guarded``: the same snippet bare, then under
    ``kernelaudit run`` with a rule (here a CPU rule file) flagging its whole call."""
    mod = benchmark_script("repro_store_findings")
    case = _case("nn.functional.softmin", "fwd", scale=10, threshold="2^31")
    n = case.batch * case.spec.extra["recipe"]["per_batch"]
    code = plain_check(case, device="cpu", chunk_elements=2**8)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"schema": 1, "rules": [{
        "name": "softmin-whole-call", "op": "nn.functional.softmin", "device": "cpu", "effect": "wrong",
        "when": {"kind": "numel", "at_least": n}, "aten": ["_softmax"], "action": "raise"}]}))
    assert mod.run_one(code, tmp_path / "bare.py", 120)["result"] == "ok"
    guarded = mod.run_one(code, tmp_path / "guarded.py", 120, [*mod.GUARDED[:-1], "--rules", str(rules), "--"])
    assert guarded["result"] == "raised" and "softmin-whole-call" in guarded["error"], guarded


def test_an_earlier_runs_settled_findings_are_carried_over_and_the_rest_run_again(tmp_path, benchmark_script):
    """``repro_store_findings.py --done``: results that running again would repeat are
    kept; a snippet not reached, timed out or out of memory (its call's or its check's) is
    run again."""
    import gzip

    mod = benchmark_script("repro_store_findings")
    entries = [
        {"case": "a", "plain": {"result": "wrong", "wrong": 3}, "guarded": {"result": "ok"}},
        {"case": "b", "plain": {"result": "no plain rendering"}},
        {"case": "c", "plain": {"result": "not run (time)"}},
        {"case": "d", "plain": {"result": "timed out", "seconds": 150}},
        {"case": "e", "plain": {"result": "raised", "error": "OutOfMemoryError: CUDA out of memory."}},
        {"case": "f", "plain": {"result": "raised", "error": "RuntimeError: CUDA error: invalid argument"}},
        # the guard fixed the call, then the program's own check ran out of memory (H100, 2026-12-06)
        {"case": "g", "plain": {"result": "raised", "error": "AcceleratorError: an illegal memory access"},
         "guarded": {"result": "crashed", "error": "kernelaudit guard: 2 calls inspected",
                     "stderr_tail": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 24.00 GiB."}},
    ]
    first = tmp_path / "results.json.gz"
    with gzip.open(first, "wt") as f:
        json.dump(entries, f)
    later = tmp_path / "later.json"
    later.write_text(json.dumps([{"case": "c", "plain": {"result": "ok"}}]))
    kept = mod.earlier([first, later])
    assert sorted(kept) == ["a", "b", "c", "f"]
    assert kept["a"]["guarded"] == {"result": "ok"} and kept["a"]["done_in"] == str(first)
    assert kept["c"]["done_in"] == str(later)


def test_a_missing_done_file_is_refused_by_name(tmp_path, capsys, benchmark_script):
    mod = benchmark_script("repro_store_findings")
    with pytest.raises(SystemExit) as e:
        mod.main([str(tmp_path), "--out", str(tmp_path / "o"), "--done", str(tmp_path / "nope.json")])
    assert e.value.code == 2 and "--done: no such file" in capsys.readouterr().err


def test_only_a_plain_run_that_showed_its_fault_is_run_again_under_the_guard(benchmark_script):
    show = benchmark_script("repro_store_findings").showed_fault
    assert show({"result": "wrong", "wrong": 3}) and show({"result": "raised", "error": "RuntimeError: x"})
    assert show({"result": "crashed", "rc": -11})
    assert not show({"result": "ok"}) and not show({"result": "timed out"})
    assert not show({"result": "raised", "error": "OutOfMemoryError: CUDA out of memory."})


def test_a_crashed_run_keeps_where_it_crashed_and_the_line_says_why_the_guarded_run_failed(tmp_path, benchmark_script):
    """A snippet that dies outside its own try (a guarded run's crash) keeps its stderr's
    tail, and the console line shows the guarded run's error beside the plain one."""
    mod = benchmark_script("repro_store_findings")
    code = "def where():\n    raise RuntimeError('CUDA error: an illegal memory access was encountered')\nwhere()\n"
    got = mod.run_one(code, tmp_path / "crash.py", 60)
    assert got["result"] == "crashed" and got["rc"] == 1
    assert got["error"].startswith("RuntimeError: CUDA error: an illegal memory access")
    assert "in where" in got["stderr_tail"] and "Traceback" in got["stderr_tail"]
    entry = {"case": "adaptive_avg_pool2d/float16/contig/in/2^31+/bwd", "store_verdict": "wrong",
             "plain": {"result": "raised", "error": "AcceleratorError: CUDA error: an illegal memory access"},
             "guarded": got}
    text = mod.line(entry)
    assert "guarded crashed" in text and text.endswith("| guarded: " + got["error"][:110])


def test_equal_infinities_in_a_plain_check_are_the_same_answer_not_a_wrong_one(tmp_path, benchmark_script):
    """float16 matrix_exp overflows to inf alike in the big call and the reference: the
    check counted inf - inf (NaN) as a difference (16,809 of 65,250 'wrong' on the CPU)."""
    case = grid(GridSpec(ops=("matrix_exp",), dtypes=("float16",), directions=("fwd",), thresholds=("2^32",),
                         positions=("below",), layouts=("contig",), scale=16))[0]
    code = plain_check(case, device="cpu", chunk_elements=2**8)
    got = benchmark_script("repro_store_findings").run_one(code, tmp_path / "matrix_exp.py", 120)
    assert got["result"] == "ok" and got["compared"] > 0 and got["max_abs_diff"] == 0.0, got
    # and a real difference still counts, infinities or not
    planted = code.replace("big = picked(call(x0))", "big = [y.clone().fill_(float('inf')) for y in picked(call(x0))]")
    assert planted != code
    bad = benchmark_script("repro_store_findings").run_one(planted, tmp_path / "planted.py", 120)
    assert bad["result"] == "wrong" and bad["wrong"] > 0 and bad["max_abs_diff"] == float("inf"), bad


def test_a_snippet_runs_with_the_allocator_settings_of_a_sweep_worker(tmp_path, monkeypatch, benchmark_script):
    """A snippet holds what its case held in the sweep: it runs with the workers' CUDA
    allocator settings (expandable segments) unless the user set their own."""
    mod = benchmark_script("repro_store_findings")
    code = "import json, os\nprint(json.dumps({'result': 'ok', 'conf': os.environ.get('PYTORCH_CUDA_ALLOC_CONF')}))\n"
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(var, raising=False)
    assert mod.run_one(code, tmp_path / "a.py", 60)["conf"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    assert mod.run_one(code, tmp_path / "b.py", 60)["conf"] == "max_split_size_mb:512"


@pytest.mark.parametrize("op, scale", [("qr", 20), ("linalg.inv", 12), ("linalg.ldl_factor", 20)])
def test_a_diagonally_dominant_case_renders_its_domain_and_gives_the_sweeps_bits(op, scale):
    """Matrix ops judged on diagonally dominant inputs (conditioned, or grown past the
    sample: ``qr`` and ``ldl_factor`` at scale 20 are 35 x 35) render ``+ n * eye``: from
    the same draw the plain code's outputs are the sweep call's bit for bit."""
    case = _case(op, "fwd", scale=scale, threshold="2^31")
    code = plain_torch(case, device="cpu")
    assert code is not None and "torch.eye(" in code
    ns: dict = {}
    torch.manual_seed(0)
    exec(compile(code, f"<{case.id}>", "exec"), ns)  # noqa: S102 - the code under test
    torch.manual_seed(0)
    raw = torch.rand(ns["x0"].shape) * 2 - 1           # the same draw, before the domain
    want = _as_tuple(case.spec.call(raw))
    out = ns["out"]
    got = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
    got = [got[o["index"]] for o in case.spec.extra["recipe"]["outs"]]
    assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))
