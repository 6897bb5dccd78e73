"""Every Triton kernel of the corpus and of the known candidates compiles for an H200 (sm_90).

The CPU tests run the kernels in the Triton interpreter, which accepts code the GPU
compiler rejects (types that change across a loop, bad constexpr use, dot shapes).
This compiles each kernel ahead of time for ``cuda:90`` - no GPU needed, only the
``ptxas`` that ships with triton - so such mistakes fail here, not on the H200.
"""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

F32 = "*fp32"


@pytest.fixture(scope="module", autouse=True)
def compiled_mode():
    """Decorate the kernels for the compiler (JITFunction), not the interpreter."""
    from kernelaudit.problems import kernels

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
    from kernelaudit.problems.kernels import LOSS_TERMS, SCAN_MODES, UNARY_OPS

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


@pytest.mark.parametrize("label, kernel, signature, constexprs", CASES, ids=[c[0] for c in CASES])
def test_corpus_kernel_compiles_for_sm90(label, kernel, signature, constexprs):
    from kernelaudit.problems import kernels

    _compile(getattr(kernels, kernel), signature, constexprs)


def _mutant_kernels():
    from kernelaudit.problems import MUTANTS_DIR

    return sorted(p.stem for p in MUTANTS_DIR.glob("*.py"))


#: Arguments of the mutants' own kernels that are not fp32 pointers or i32 sizes.
_ARG_TYPES = {"alpha": "fp32", "eps": "fp32", "scale": "fp32"}
_CONSTEXPRS = {"BM": 32, "BN": 32, "BK": 32, "BLOCK": 1024, "BLOCK_I": 32}


@pytest.mark.parametrize("name", _mutant_kernels())
def test_known_candidate_kernels_compile_for_sm90(name):
    from kernelaudit.problems import MUTANTS_DIR, load_candidate

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
