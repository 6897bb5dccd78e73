"""unique_consecutive: an output whose length depends on the values, judged by a
chunked reference (judge/global_refs.py) that never crosses the limits."""

from kernelaudit import GridSpec, run_sweep

from .test_sweep_faults import _records


def _run(tmp_path, fault_model, dtypes=("float16", "int32")):
    spec = GridSpec(ops=("unique_consecutive",), dtypes=dtypes, thresholds=("2^32",),
                    positions=("below", "above"), scale=14)
    return _records(run_sweep(spec, tmp_path, device="cpu", fault_model=fault_model).store)


def test_unique_consecutive_is_ok_on_a_correct_op_in_every_dtype(tmp_path):
    recs = _run(tmp_path, "none", ("float32", "float16", "bfloat16", "int32", "int64"))
    assert len(recs) == 10
    assert all(v.status.value == "ok" for _, v in recs), [(c.id, v.explain()) for c, v in recs]


def test_unique_consecutive_wrapped_past_2p32_is_wrong_only_above(tmp_path):
    # wrap32 reads the input's tail from its head (the last batch is wrong) and, where
    # the output too passes 2^32 (float16: few equal neighbours), writes its tail over
    # its head (the first batch is wrong too).
    recs = _run(tmp_path, "wrap32")
    for case, v in recs:
        expected = "wrong" if case.position == "above" else "ok"
        assert v.status.value == expected, (case.id, v.explain())
        if expected == "wrong":
            assert v.bad_batches.last == case.batch - 1
            if case.dtype == "float16":
                assert (v.bad_batches.first, v.first_bad_index) == (0, 0)


def test_unique_consecutive_unwritten_output_tail_is_wrong_only_above(tmp_path):
    recs = _run(tmp_path, "unwritten-tail", ("float16",))
    for case, v in recs:
        assert v.status.value == ("wrong" if case.position == "above" else "ok"), (case.id, v.explain())
