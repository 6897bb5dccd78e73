"""Every Triton kernel of the corpus and of the known candidates compiles for an H200 (sm_90).

The CPU tests run the kernels in the Triton interpreter, which accepts code the GPU
compiler rejects (types that change across a loop, bad constexpr use, dot shapes).
This compiles each kernel ahead of time for ``cuda:90`` - no GPU needed, only the
``ptxas`` that ships with triton - so such mistakes fail here, not on the H200.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernelaudit.config import interpreter_requested

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

F32 = "*fp32"

#: Triton (3.9) builds its standard library as interpreted functions when it is imported
#: with TRITON_INTERPRET=1, and then cannot compile for a GPU in that process. So under
#: the interpreter (the CPU test run) this module runs itself again in a child process
#: with the interpreter off, and its compile tests run there.
INTERPRETED = interpreter_requested()
compile_here = pytest.mark.skipif(INTERPRETED, reason="runs in a child process without the Triton interpreter")


@pytest.mark.skipif(not INTERPRETED, reason="this process compiles directly")
def test_every_kernel_compiles_for_sm90_in_a_process_without_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


@pytest.fixture(scope="module", autouse=True)
def compiled_mode():
    """Decorate the kernels for the compiler (JITFunction), not the interpreter."""
    from kernelaudit.zoo.problems import solution_kernels as kernels

    before = kernels.set_interpret(False)
    yield
    kernels.set_interpret(before)


def _compile(fn, signature: dict, constexprs: dict) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    except TypeError:  # pragma: no cover - older ASTSource spelling
        src = ASTSource(fn=fn, signature=signature, constants=constexprs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32))


def _ints(*names):
    return {n: "i32" for n in names}


def _cases():
    """(label, kernel name in kernels.py, signature, constexprs)."""
    c = "constexpr"
    yield from (
        (f"matmul tf32={t}", "_matmul_kernel",
         {"a_ptr": F32, "b_ptr": F32, "c_ptr": F32, **_ints("M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk",
                                                             "s_bn", "s_cb", "s_cm", "s_cn"),
          "BM": c, "BN": c, "BK": c, "TF32": c}, {"BM": 32, "BN": 32, "BK": 32, "TF32": t})
        for t in (False, True)
    )
    from kernelaudit.zoo.problems.solution_kernels import LOSS_TERMS, SCAN_MODES, UNARY_OPS

    for op in UNARY_OPS:
        yield (f"unary {op}", "_unary_kernel", {"x_ptr": F32, "y_ptr": F32, "n": "i32", "alpha": "fp32", "beta": "fp32",
                                                 "OP": c, "BLOCK": c}, {"OP": op, "BLOCK": 1024})
    for log in (False, True):
        yield (f"softmax log={log}", "_softmax_kernel", {"x_ptr": F32, "y_ptr": F32, "N": "i32", "LOG": c, "BLOCK": c},
               {"LOG": log, "BLOCK": 1024})
    for kind in ("layer", "rms", "l2"):
        yield (f"row_norm {kind}", "_row_norm_kernel", {"x_ptr": F32, "w_ptr": F32, "b_ptr": F32, "y_ptr": F32,
                                                         "N": "i32", "eps": "fp32", "KIND": c, "BLOCK": c},
               {"KIND": kind, "BLOCK": 1024})
    yield ("bn affine", "_affine_channel_kernel", {"x_ptr": F32, "scale_ptr": F32, "shift_ptr": F32, "y_ptr": F32,
                                                    **_ints("n", "C", "HW"), "BLOCK": c}, {"BLOCK": 1024})
    yield ("bn coefficients", "_bn_coeff_kernel", {"mean_ptr": F32, "var_ptr": F32, "w_ptr": F32, "b_ptr": F32,
                                                   "scale_ptr": F32, "shift_ptr": F32, "C": "i32", "eps": "fp32",
                                                   "BLOCK": c}, {"BLOCK": 128})
    for mean in (False, True):
        yield (f"sum mean={mean}", "_sum_kernel", {"x_ptr": F32, "y_ptr": F32, **_ints("R", "INNER"), "MEAN": c,
                                                    "BLOCK_R": c, "BLOCK_I": c},
               {"MEAN": mean, "BLOCK_R": 32, "BLOCK_I": 32})
    for neg in (False, True):
        for arg in (False, True):
            yield (f"max neg={neg} arg={arg}", "_max_kernel",
                   {"x_ptr": F32, "y_ptr": "*i64" if arg else F32, **_ints("R", "INNER"), "NEG": c, "ARG": c,
                    "BLOCK_R": c, "BLOCK_I": c}, {"NEG": neg, "ARG": arg, "BLOCK_R": 32, "BLOCK_I": 32})
    for mode in SCAN_MODES:
        yield (f"scan {mode}", "_scan_kernel", {"x_ptr": F32, "m_ptr": "*i8" if mode == "masked" else F32,
                                                 "y_ptr": F32, "L": "i32", "MODE": c, "BLOCK": c},
               {"MODE": mode, "BLOCK": 256})
    for kind in LOSS_TERMS:
        yield (f"loss {kind}", "_loss_terms_kernel", {"p_ptr": F32, "t_ptr": F32, "part_ptr": F32, "n": "i32",
                                                      "KIND": c, "BLOCK": c}, {"KIND": kind, "BLOCK": 1024})
    yield ("cross entropy", "_cross_entropy_kernel", {"x_ptr": F32, "t_ptr": "*i64", "loss_ptr": F32, "C": "i32",
                                                      "BLOCK": c}, {"BLOCK": 1024})
    for mx in (False, True):
        yield (f"pool2d max={mx}", "_pool2d_kernel",
               {"x_ptr": F32, "y_ptr": F32, **_ints("n_out", "H", "W", "OH", "OW"), "KH": c, "KW": c, "SH": c,
                "SW": c, "MAX": c, "BLOCK": c}, {"KH": 3, "KW": 3, "SH": 2, "SW": 2, "MAX": mx, "BLOCK": 256})
    for causal in (False, True):
        yield (f"attention causal={causal}", "_attention_kernel",
               {"q_ptr": F32, "k_ptr": F32, "v_ptr": F32, "o_ptr": F32, **_ints("S", "D"), "scale": "fp32",
                "CAUSAL": c, "BM": c, "BN": c, "BD": c}, {"CAUSAL": causal, "BM": 32, "BN": 32, "BD": 64})


CASES = list(_cases())


@compile_here
@pytest.mark.parametrize("label, kernel, signature, constexprs", CASES, ids=[c[0] for c in CASES])
def test_corpus_kernel_compiles_for_sm90(label, kernel, signature, constexprs):
    from kernelaudit.zoo.problems import solution_kernels as kernels

    _compile(getattr(kernels, kernel), signature, constexprs)


def _mutant_kernels():
    from kernelaudit.zoo.problems import MUTANTS_DIR

    return sorted(p.stem for p in MUTANTS_DIR.glob("*.py"))


#: Arguments of the mutants' own kernels that are not fp32 pointers or i32 sizes.
_ARG_TYPES = {"alpha": "fp32", "eps": "fp32", "scale": "fp32"}
_CONSTEXPRS = {"BM": 32, "BN": 32, "BK": 32, "BLOCK": 1024, "BLOCK_I": 32}


@compile_here
@pytest.mark.parametrize("name", _mutant_kernels())
def test_known_candidate_kernels_compile_for_sm90(name):
    from kernelaudit.zoo.problems import MUTANTS_DIR, load_candidate

    module = load_candidate(MUTANTS_DIR / f"{name}.py").module
    own = [v for k, v in vars(module).items()
           if type(v).__name__ == "JITFunction" and getattr(v, "__module__", None) == module.__name__
           and set(v.arg_names) & {"BM", "BLOCK", "BLOCK_I"}]
    for fn in own:
        sig, cx = {}, {}
        for a in fn.arg_names:
            if a in _CONSTEXPRS:
                sig[a], cx[a] = "constexpr", _CONSTEXPRS[a]
            elif a.endswith("_ptr"):
                sig[a] = "*i64" if (a == "t_ptr" or (a == "y_ptr" and "argmax" in name)) else F32
            else:
                sig[a] = _ARG_TYPES.get(a, "i32")
        _compile(fn, sig, cx)


def _own_kernel_cases():
    """kernelaudit's own kernels (input generation, Freivalds, spot checks, comparison)."""
    c, i64 = "constexpr", "i64"
    desc = lambda p: {f"{p}_key": i64, f"{p}_off": i64, **{f"s{p}{d}": i64 for d in range(4)}}  # noqa: E731
    for dt, acc in ((0, "fp64"), (1, "fp32"), (2, "fp32")):
        for has_m in (False, True):
            sig = {"c_ptr": "*fp32" if dt == 0 else "*bf16", **{f"sc{d}": i64 for d in range(4)},
                   "x_ptr": f"*{acc}", "y_ptr": f"*{acc}", "out_ptr": "*fp64", **desc("a"), **desc("b"), **desc("m"),
                   "H": i64, "Mdim": i64, "Ndim": i64, "Kdim": i64, "alpha": "fp32", "beta": "fp32",
                   "HAS_M": c, "DT": c, "ACC": c, "BM": c, "BN": c, "BK": c}
            cx = {"HAS_M": has_m, "DT": dt, "ACC": getattr(triton.language, f"float{acc[2:]}"),
                  "BM": 32, "BN": 32, "BK": 64}
            pre = {f"p{r}_{x}": t for r in "abm" for x, t in (("ptr", "*fp64"), ("sb", i64), ("sh", i64))}
            for name in ("_freivalds_kernel",):
                for flags in ((False, False, False), (True, True, has_m)):
                    yield (f"{name} DT={dt} M={has_m} pre={flags}", "freivalds", name,
                           {**sig, **pre, "PRE_A": c, "PRE_B": c, "PRE_M": c},
                           {**cx, "PRE_A": flags[0], "PRE_B": flags[1], "PRE_M": flags[2]})
    for keep in (0, 1, 2):
        # bf16 storage with float32 sums, float32 storage with float64 sums (smaller tiles);
        # int32 offsets in whole tiles (small strides arrive as i32), or int64 and masks
        for dt, st, w, acc, other in ((2, "*bf16", "*fp32", "float32", 64), (0, "*fp32", "*fp64", "float64", 32)):
            for off32 in (False, True):
                st_t = "i32" if off32 else i64
                yield (f"generate and project keep_rows={keep} {acc} off32={off32}", "freivalds",
                       "_gen_project_kernel",
                       {"st_ptr": st, "w_ptr": w, "proj_ptr": "*fp64", "key": i64, "off": i64,
                        "s0": i64, "s1": i64, "s2": st_t, "s3": st_t, "H": i64, "R": st_t, "Cn": st_t, "DT": c,
                        "ACC": c, "KEEP_ROWS": c, "BR": c, "BC": c, "OFF32": c, "EVEN": c, "FLAT": c},
                       {"DT": dt, "ACC": getattr(triton.language, acc), "KEEP_ROWS": keep,
                        "BR": 64 if keep == 1 else other, "BC": other if keep == 1 else 64, "OFF32": off32,
                        "EVEN": off32, "FLAT": off32 and keep != 1})
    sig = {"c_ptr": "*fp16", **{f"sc{d}": i64 for d in range(4)}, **{f"{n}_ptr": "*i64" for n in "bb hh ii jj".split()},
           "out_ptr": "*fp64", "n": i64, **desc("a"), **desc("b"), **desc("m"), "Kdim": i64, "alpha": "fp32",
           "beta": "fp32", "HAS_M": c, "DT": c, "BS": c, "BK": c}
    yield ("spots", "freivalds", "_spot_kernel", sig, {"HAS_M": True, "DT": 1, "BS": 32, "BK": 64})
    for has_s in (False, True):
        yield (f"row_max scale={has_s}", "compare", "_rowmax_kernel",
               {"g_ptr": "*bf16", "r_ptr": "*fp64", "s_ptr": "*fp64", "out_ptr": "*fp64", "ovf_ptr": "*fp64",
                "nrows": i64,
                "row_len": i64, "HAS_S": c, "ROWS": c, "BLOCK": c}, {"HAS_S": has_s, "ROWS": 4, "BLOCK": 512})
    for kind in (0, 1, 2):
        for source in (0, 1, 2):
            # below 2^31 positions (int32, whole blocks unmasked) and past it (int64, masked)
            for wide, ints in ((False, "i32"), (True, i64)):
                yield (f"hash kind={kind} source={source} wide={wide}", "gen", "_hash_kernel",
                       {"out_ptr": "*bf16" if kind == 0 else "*i64", "idx_ptr": "*i64", "start": i64, "n": ints,
                        "pos0": ints, "key": i64, "high": i64, **{f"d{d}": ints for d in (1, 2, 3)},
                        **{f"t{d}": i64 for d in range(4)}, "KIND": c, "SOURCE": c, "DT": c, "WIDE": c, "EVEN": c,
                        "BLOCK": c},
                       {"KIND": kind, "SOURCE": source, "DT": 2 if kind == 0 else 0, "WIDE": wide, "EVEN": not wide,
                        "BLOCK": 1024})
    for t0 in ("i64", "i32"):  # a zero tolerance's bits fit int32
        yield (f"summary t0={t0}", "summary", "_summary_kernel",
               {"pb_ptr": "*fp64", "out_ptr": "*fp64", "n": i64, "stride": i64, "t0_bits": t0, "t1_bits": i64,
                "BLOCK": c}, {"BLOCK": 1024})
    for dt, acc in (("*bf16", "float32"), ("*fp32", "float64")):
        yield (f"C stream {dt}", "freivalds", "_lhs_kernel",
               {"c_ptr": dt, **{f"sc{d}": i64 for d in range(4)}, "x_ptr": f"*fp{acc[-2:]}", "y_ptr": f"*fp{acc[-2:]}",
                "part_ptr": "*fp64", "H": i64, "Mdim": i64, "Ndim": i64, "SPLIT": i64, "ACC": c, "ROWS": c, "BN": c,
                "ITERS": c, "STAGES": c},
               {"ACC": getattr(triton.language, acc), "ROWS": 4, "BN": 256, "ITERS": 8, "STAGES": 3})
    for (dt, c_dt, acc), (inter, maskc) in zip(((2, "*bf16", "float32"), (0, "*fp32", "float64")),
                                               ((True, False), (False, True))):
        yield (f"flat {c_dt} interleave={inter} maskc={maskc}", "freivalds", "_flat_kernel",
               {"c_ptr": c_dt, **{f"sc{d}": i64 for d in range(4)}, "x_ptr": f"*fp{acc[-2:]}",
                "y_ptr": f"*fp{acc[-2:]}", "v_ptr": f"*fp{acc[-2:]}", "out_ptr": "*fp64", "a_key": i64, "a_off": i64,
                "sa0": i64, "sa1": i64, "b_key": i64, "b_off": i64, "sb0": i64, "sb1": i64, "H": i64, "Mdim": "i32",
                "alpha": "fp32", "DT": c, "ACC": c, "BK": c, "BN": c, "BRA": c, "BRB": c, "CR": c, "MASKC": c,
                "INTERLEAVE": c, "STAGES": c},
               {"DT": dt, "ACC": getattr(triton.language, acc), "BK": 64, "BN": 256, "BRA": 16, "BRB": 4, "CR": 8,
                "MASKC": maskc, "INTERLEAVE": inter, "STAGES": 3})


OWN_CASES = list(_own_kernel_cases())


@compile_here
@pytest.mark.parametrize("label, module, kernel, signature, constexprs", OWN_CASES, ids=[c[0] for c in OWN_CASES])
def test_kernelaudit_kernels_compile_for_sm90(label, module, kernel, signature, constexprs):
    import importlib

    _compile(getattr(importlib.import_module(f"kernelaudit.sweep.kernels.{module}"), kernel), signature, constexprs)
