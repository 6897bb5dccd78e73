"""Reports of a run store: loading, terminal summary, boundary map, HTML page.

Every test builds a small synthetic store in ``tmp_path`` in the format the store
module writes (manifest.json + verdicts.jsonl), so nothing here runs a case.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from kernelaudit.sweep import report
from kernelaudit.sweep.report import RunStoreError, boundary_grid, load_run, print_summary, render_boundary_map
from kernelaudit.sweep.report import figure as figure_mod
from kernelaudit.sweep.report.figure import grid_rgb, title_text
from kernelaudit.sweep.report.grid import Panel, size_label_key, status_rgb
from kernelaudit.verdict import BadBatches, Status, Verdict

BITS = 12  # scaled thresholds: 2^31 -> 2^11, 2^32 -> 2^12
T31, T32, T33 = 2 ** (BITS - 1), 2**BITS, 2 ** (BITS + 1)
PER_BATCH = 16 * 16  # (B,16,4) @ (B,4,16): the output crosses


def manifest(**over) -> dict:
    m = {
        "kernelaudit": "0.1.0", "torch": "2.13.0+cpu", "triton": None, "python": "3.11.9", "os": "Linux",
        "driver": None, "device": {"type": "cpu", "name": "Test CPU", "memory_bytes": 8 * 2**30},
        "thresholds": {"bits": BITS, "2^31": T31, "2^32": T32, "2*2^32": T33},
        "fault_model": "wrap32", "tolerances": {"bmm/float16/contig/fwd": {"rel_max_err": 4e-3}},
        "seeds": [0], "started": "2026-12-02T10:00:00+00:00", "argv": ["kernelaudit", "sweep"],
        "plan": {"cases": 12},
    }
    m.update(over)
    return m


def case(op="bmm", dtype="float16", layout="contig", size="2^32+", direction="fwd", series="out", seed=0) -> dict:
    """A case dict as the sweep records it, with the batch placed around the size label."""
    threshold, sign = re.match(r"(.*?)([+-]?)$", size).groups()
    numel = {"2^31": T31, "2^32": T32, "2*2^32": T33}[threshold]
    batch = numel // PER_BATCH + {"-": -1, "": 0, "+": 1}[sign]
    return {
        "id": f"{op}/{dtype}/{layout}/{series}/{size}/{direction}",
        "op": op, "family": "matmul", "dtype": dtype, "layout": layout, "series": series,
        "threshold": threshold, "position": {"-": "below", "": "at", "+": "above"}[sign], "size": size,
        "batch": batch, "direction": direction, "seed": seed, "scale": BITS,
        "shapes": [[batch, 16, 4], [batch, 4, 16]], "out_shape": [batch, 16, 16],
        "crossing_numel": batch * PER_BATCH,
    }


def line(c: dict, v: Verdict) -> str:
    return json.dumps({"case": c, "verdict": v.to_json(), "elapsed_s": 0.01, "recorded": "2026-12-02T10:00:01+00:00"})


OK = Verdict.passed("rel_max_err", 1e-4, 4e-3)
# A first bad index past 2^32 on purpose: it must print as an exact int.
WRONG = Verdict(Status.WRONG, "rel_max_err", 0.75, 4e-3, BadBatches(16, 16, 1), 4295032832, "index wrapped")
WRONG_ALL = Verdict(Status.WRONG, "rel_max_err", float("inf"), 4e-3, BadBatches(0, 16, 17), 7, "")
ERROR = Verdict.error("RuntimeError: MPSGraph does not support tensor dims larger than INT_MAX")
SKIP = Verdict.skipped("needs 34.4 GB, device has 16.0 GB")
SKIP2 = Verdict.skipped("needs 68.7 GB, device has 16.0 GB")


def store(tmp_path: Path, lines: list[str], tail: str = "", name: str = "run", **manifest_over) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps(manifest(**manifest_over)))
    (d / "verdicts.jsonl").write_text("".join(s + "\n" for s in lines) + tail)
    return d


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Every status, a repeated id (ok, then wrong: the wrong one counts), a torn last line."""
    lines = [
        line(case(size="2^31-"), OK),
        line(case(size="2^32+"), OK),  # recorded again below: the later verdict wins
        line(case(size="2^32"), OK),
        line(case(layout="aT", size="2^32+"), WRONG_ALL),
        line(case(layout="bT", size="2^31"), ERROR),
        line(case(layout="slice", size="2*2^32+"), SKIP),
        line(case(layout="slice", size="2*2^32"), SKIP2),
        line(case(size="2^32+", direction="bwd"), WRONG),
        line(case(op="matmul", size="2^31+"), ERROR),
        line(case(op="matmul", size="2^31"), OK),
        line(case(size="2^32+"), WRONG),
    ]
    torn = line(case(op="matmul", size="2^32"), OK)[:50]  # crash mid-write, no newline
    return store(tmp_path, lines, tail=torn)


def summary_text(run, width=200) -> str:
    console = Console(record=True, width=width, color_system=None)
    print_summary(run, console=console)
    return console.export_text()


# -- loading ------------------------------------------------------------------------


def test_load_run_reads_manifest_facts(run_dir):
    m = load_run(run_dir).manifest
    assert (m.torch, m.fault_model, m.device.type, m.scale_bits, m.planned_cases) == (
        "2.13.0+cpu", "wrap32", "cpu", BITS, 12)
    assert m.tolerances["bmm/float16/contig/fwd"]["rel_max_err"] == 4e-3
    assert m.date == "2026-12-02"


def test_load_run_drops_torn_last_line_and_says_so(run_dir):
    run = load_run(run_dir)
    assert len(run.records) == 10
    assert not any(r.id == "matmul/float16/contig/out/2^32/fwd" for r in run.records)
    assert any("incomplete line(s)" in n and "first at line 12" in n for n in run.notes)


def test_load_run_keeps_last_verdict_of_a_repeated_case_id(run_dir):
    run = load_run(run_dir)
    recs = [r for r in run.records if r.id == "bmm/float16/contig/out/2^32+/fwd"]
    assert len(recs) == 1
    assert recs[0].status is Status.WRONG and recs[0].verdict.first_bad_index == 4295032832
    assert any("repeat a case already recorded" in n for n in run.notes)


def test_load_run_keeps_every_seed_of_one_case_id(tmp_path):
    run = load_run(store(tmp_path, [line(case(seed=0), OK), line(case(seed=1), WRONG), line(case(seed=0), ERROR)]))
    assert [(r.seed, r.status) for r in run.records] == [(0, Status.ERROR), (1, Status.WRONG)]
    assert run.several_seeds and "seed 1" in summary_text(run)


def test_load_run_reads_case_objects_as_cases_py_writes_them(tmp_path):
    from kernelaudit.sweep.cases import Case

    c = Case(op="bmm", dtype="float16", layout="aT", series="out", threshold="2^32", position="above",
             batch=17, direction="fwd", scale=BITS)
    # Derived facts recorded next to the case rather than inside it are found too.
    rec = {"case": c.to_json(), "verdict": WRONG.to_json(), "elapsed_s": 0.1, "recorded": "",
           "shapes": [[17, 16, 4], [17, 4, 16]], "crossing_numel": 17 * PER_BATCH}
    (r,) = load_run(store(tmp_path, [json.dumps(rec)])).records
    assert (r.id, r.family, r.size, r.batch, r.key) == (c.id, "matmul", "2^32+", 17, c.key)
    cj = c.to_json()  # the case records its own shapes; they win over the record's
    assert (r.shapes_text, r.crossing_numel) == (" @ ".join("x".join(map(str, s)) for s in cj["shapes"]),
                                                 cj["crossing_numel"])


def test_load_run_reads_non_finite_values_back(run_dir):
    rec = next(r for r in load_run(run_dir).records if r.layout == "aT")
    assert rec.verdict.value == float("inf")


def test_load_run_without_verdicts_file_is_an_empty_run(tmp_path):
    d = store(tmp_path, [])
    (d / "verdicts.jsonl").unlink()
    run = load_run(d)
    assert run.records == () and run.notes


def _no_dir(tmp_path):
    return tmp_path / "absent"


def _no_manifest(tmp_path):
    d = store(tmp_path, [])
    (d / "manifest.json").unlink()
    return d


def _bad_manifest(tmp_path):
    d = store(tmp_path, [])
    (d / "manifest.json").write_text("{not json")
    return d


def _bad_middle_line(tmp_path):
    return store(tmp_path, [line(case(), OK), "{torn", line(case(size="2^32"), OK)])


def _no_case(tmp_path):
    return store(tmp_path, [json.dumps({"verdict": OK.to_json()})])


def _bad_status(tmp_path):
    return store(tmp_path, [json.dumps({"case": case(), "verdict": {**OK.to_json(), "status": "maybe"}})])


def test_load_run_reads_past_a_torn_middle_line_left_by_an_older_resume(tmp_path):
    """A store an older kernelaudit resumed after a crash holds a torn line with records
    after it: it is read, the torn line ignored and named, never a traceback."""
    run = load_run(_bad_middle_line(tmp_path))
    assert len(run.records) == 2
    assert any("first at line 2" in n for n in run.notes)


@pytest.mark.parametrize("make, fragment", [
    (_no_dir, "does not exist"),
    (_no_manifest, "no manifest.json"),
    (_bad_manifest, "manifest.json: not valid JSON"),
    (_no_case, "verdicts.jsonl line 1: expected an object with 'case'"),
    (_bad_status, "verdicts.jsonl line 1: bad verdict"),
])
def test_load_run_rejects_a_broken_store_naming_the_path(tmp_path, make, fragment):
    d = make(tmp_path)
    with pytest.raises(RunStoreError, match=re.escape(fragment)) as info:
        load_run(d)
    assert str(d) in str(info.value)


# -- terminal summary -----------------------------------------------------------------


def test_summary_lists_every_wrong_and_error_case_with_its_evidence(run_dir):
    run = load_run(run_dir)
    text = summary_text(run)
    bad = run.with_status(Status.WRONG, Status.ERROR)
    assert len(bad) == 5
    for r in bad:
        assert r.id in text
        assert r.verdict.explain() in text
        assert r.shapes_text in text and f"B={r.batch}" in text
    assert "first bad flat index 4295032832" in text and "batch 16" in text


def test_summary_counts_statuses_overall_and_per_op(run_dir):
    text = summary_text(load_run(run_dir)).split("Where the time went")[0]  # the verdict table only
    rows = {m.group(1): m.group(2).split() for m in re.finditer(r"│ (bmm|matmul|all)\s+│(.*)│", text)}
    # columns: ok wrong error skipped total
    assert [c.strip("│") for c in rows["bmm"] if c != "│"] == ["2", "3", "1", "2", "8"]
    assert [c.strip("│") for c in rows["matmul"] if c != "│"] == ["1", "0", "1", "0", "2"]
    assert [c.strip("│") for c in rows["all"] if c != "│"] == ["3", "3", "2", "2", "10"]


def test_summary_of_many_ops_lists_those_not_all_ok_and_sums_the_rest(tmp_path, monkeypatch):
    from kernelaudit.sweep.report import summary as summary_mod

    monkeypatch.setattr(summary_mod, "COUNTS_TABLE_OPS", 2)
    lines = [line(case(op="bmm"), WRONG), line(case(op="bmm", size="2^31-"), OK),
             line(case(op="matmul"), OK), line(case(op="mm"), OK), line(case(op="mm", size="2^31-"), OK)]
    text = summary_text(load_run(store(tmp_path, lines))).split("Where the time went")[0]
    assert re.search(r"│ bmm\s+│\s+1 │\s+1 │", text)
    assert "│ matmul" not in text and "│ mm " not in text
    assert re.search(r"│ 2 more ops, every case ok\s+│\s+3 │\s+0 │\s+0 │\s+0 │\s+3 │", text)
    assert re.search(r"│ all\s+│\s+4 │\s+1 │", text)


def test_summary_groups_skips_that_differ_only_in_numbers(run_dir):
    text = summary_text(load_run(run_dir))
    assert re.search(r"│\s+2 │ needs 34\.4 GB, device has 16\.0 GB", text)
    assert "68.7 GB" not in text


def test_summary_groups_error_messages_with_counts(run_dir):
    text = summary_text(load_run(run_dir))
    assert "Errors, by message" in text
    assert re.search(r"│\s+2 │ RuntimeError: MPSGraph does not support", text)


def test_summary_shows_load_notes_and_progress(run_dir):
    text = summary_text(load_run(run_dir))
    assert "10 of 12 planned cases recorded" in text
    assert "incomplete" in text


def test_summary_adds_up_the_wall_time_of_every_sweep_invocation(tmp_path):
    segments = [{"started": "a", "wall_s": 380.0, "completed": False, "cases_run": 1300},
                {"started": "b", "wall_s": 232.5, "completed": True, "cases_run": 4325}]
    run = load_run(store(tmp_path, [line(case(), OK)], segments=segments))
    assert run.manifest.wall_s == 612.5
    assert "612 s (10.2 min) in 2 invocations, 1 cut short" in summary_text(run)
    assert "wall time" not in summary_text(load_run(store(tmp_path, [line(case(), OK)], name="old")))
    assert "replaced" not in summary_text(run)  # older stores have no count: nothing to say


def test_summary_counts_the_workers_a_run_replaced(tmp_path):
    segments = [{"started": "a", "wall_s": 100.0, "completed": True, "workers_replaced": 2},
                {"started": "b", "wall_s": 50.0, "completed": True, "workers_replaced": 1}]
    run = load_run(store(tmp_path, [line(case(), OK)], segments=segments))
    assert "150 s (2.5 min) in 2 invocations, 3 workers replaced" in summary_text(run)


def test_summary_and_map_title_name_every_device_a_resumed_run_went_on_with(tmp_path):
    segments = [{"started": "a", "wall_s": 100.0, "completed": False, "cases_run": 667},
                {"started": "b", "wall_s": 50.0, "completed": False, "cases_run": 1148,
                 "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984}}]
    run = load_run(store(tmp_path, [line(case(), OK)], segments=segments))
    assert f"cases run on {run.manifest.device.name} (667), NVIDIA H100 80GB HBM3 (1148)" in summary_text(run)
    assert "cases run on" not in summary_text(load_run(store(tmp_path, [line(case(), OK)], segments=segments[:1],
                                                             name="one")))
    assert f"Boundary map - {run.manifest.device.name} and NVIDIA H100 80GB HBM3 (" in title_text(run)


def test_summary_of_a_run_with_nothing_bad_says_so(tmp_path):
    assert "No wrong or error cases" in summary_text(load_run(store(tmp_path, [line(case(), OK)])))


def test_summary_of_a_thousand_wrong_cases_has_one_heading_per_op(tmp_path):
    lines = [line(case(op=op, seed=seed), WRONG) for op in ("bmm", "matmul") for seed in range(600)]
    text = summary_text(load_run(store(tmp_path, lines)))
    assert len(re.findall(r"^bmm: 600 wrong, 0 error", text, re.M)) == 1
    assert len(re.findall(r"^matmul: 600 wrong, 0 error", text, re.M)) == 1
    assert text.count("first bad flat index 4295032832") == 1200
    assert "seed 599" in text


def test_summary_stays_readable_in_a_narrow_terminal(run_dir):
    text = summary_text(load_run(run_dir), width=80)
    assert all(len(s) <= 80 for s in text.splitlines())
    assert "bmm/float16/aT/out/2^32+/fwd" in text  # ids are not folded mid-word at 80 columns


# -- boundary grid (the map as data) --------------------------------------------------------


def test_boundary_grid_has_one_panel_per_op_series_dtype_direction(run_dir):
    panels = list(boundary_grid(load_run(run_dir)))
    assert panels == [
        Panel("matmul", "bmm", "out", "float16", "fwd"),
        Panel("matmul", "bmm", "out", "float16", "bwd"),
        Panel("matmul", "matmul", "out", "float16", "fwd"),
    ]


def test_boundary_grid_cells_hold_their_status_and_none_when_not_run(run_dir):
    g = boundary_grid(load_run(run_dir))[Panel("matmul", "bmm", "out", "float16", "fwd")]
    assert g.rows == ("contig", "aT", "bT", "slice")
    assert g.at("contig", "2^31-") is Status.OK
    assert g.at("contig", "2^32+") is Status.WRONG  # the repeated id's later verdict
    assert g.at("aT", "2^32+") is Status.WRONG
    assert g.at("bT", "2^31") is Status.ERROR
    assert g.at("slice", "2*2^32+") is Status.SKIPPED
    assert g.at("aT", "2^31-") is None


def test_boundary_grid_columns_follow_crossing_numel(run_dir):
    g = boundary_grid(load_run(run_dir))[Panel("matmul", "bmm", "out", "float16", "fwd")]
    assert g.cols == ("2^31-", "2^31", "2^32", "2^32+", "2*2^32", "2*2^32+")


def test_panels_of_one_op_and_series_share_rows_and_columns(run_dir):
    grids = boundary_grid(load_run(run_dir))
    fwd = grids[Panel("matmul", "bmm", "out", "float16", "fwd")]
    bwd = grids[Panel("matmul", "bmm", "out", "float16", "bwd")]
    assert (fwd.rows, fwd.cols) == (bwd.rows, bwd.cols)
    assert bwd.at("contig", "2^32+") is Status.WRONG and bwd.at("contig", "2^31-") is None


def test_boundary_grid_cell_shows_the_worst_of_several_seeds(tmp_path):
    run = load_run(store(tmp_path, [line(case(seed=0), OK), line(case(seed=1), WRONG), line(case(seed=2), OK)]))
    (g,) = boundary_grid(run).values()
    assert g.cells == ((Status.WRONG,),)


def test_size_labels_order_by_threshold_then_position():
    labels = ["2*2^32", "2^32+", "2^31", "2^31-", "2^32-", "2*2^32-", "2^31+"]
    assert sorted(labels, key=size_label_key) == ["2^31-", "2^31", "2^31+", "2^32-", "2^32+", "2*2^32-", "2*2^32"]


# -- boundary-map figure ----------------------------------------------------------------------


def test_boundary_map_draws_each_cell_in_its_status_colour(run_dir):
    run = load_run(run_dir)
    grids = boundary_grid(run)
    fig = render_boundary_map(run, grids)
    images = {im.get_gid(): im for ax in fig.axes for im in ax.get_images()}
    assert set(images) == {p.title for p in grids}
    for panel, g in grids.items():
        drawn = np.asarray(images[panel.title].get_array())
        assert drawn.shape == (len(g.rows), len(g.cols), 3)
        np.testing.assert_allclose(drawn, grid_rgb(g))
    g = grids[Panel("matmul", "bmm", "out", "float16", "fwd")]
    drawn = np.asarray(images[Panel("matmul", "bmm", "out", "float16", "fwd").title].get_array())
    for (layout, size, status) in [("contig", "2^32+", Status.WRONG), ("bT", "2^31", Status.ERROR),
                                   ("slice", "2*2^32", Status.SKIPPED), ("contig", "2^31-", Status.OK),
                                   ("aT", "2^31-", None)]:
        i, j = g.rows.index(layout), g.cols.index(size)
        assert tuple(drawn[i, j]) == pytest.approx(status_rgb(status))


def test_boundary_map_labels_rows_with_layouts_and_columns_with_sizes(run_dir):
    run = load_run(run_dir)
    panel = Panel("matmul", "bmm", "out", "float16", "fwd")
    g = boundary_grid(run)[panel]
    fig = render_boundary_map(run)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == panel.title]
    (title,) = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == f"{panel.title}:title"]
    assert title.replace("\n", " ") == panel.title
    assert texts[: len(g.cols) + len(g.rows)] == [*g.cols, *g.rows]
    assert texts.count("W") == sum(row.count(Status.WRONG) for row in g.cells)
    assert texts.count("E") == sum(row.count(Status.ERROR) for row in g.cells)


def test_status_colours_are_distinct_and_not_run_is_white():
    colours = [status_rgb(s) for s in (*Status, None)]
    assert len(set(colours)) == 5
    assert status_rgb(None) == (1.0, 1.0, 1.0)
    assert status_rgb(Status.WRONG)[0] > 0.7 > status_rgb(Status.WRONG)[1]  # red
    assert status_rgb(Status.OK)[1] > status_rgb(Status.OK)[0]  # green


def test_boundary_map_title_names_device_torch_fault_model_scale_and_date(run_dir):
    fig = render_boundary_map(load_run(run_dir))
    texts = " ".join(t.get_text() for t in fig.texts)
    for fact in ("Test CPU", "torch 2.13.0+cpu", "fault model wrap32", f"2^{BITS}", "2026-12-02"):
        assert fact in texts


def test_figure_grows_with_the_number_of_panels(run_dir, tmp_path):
    small = render_boundary_map(load_run(store(tmp_path, [line(case(), OK)], name="small")))
    big = render_boundary_map(load_run(run_dir))
    assert big.get_size_inches()[1] > small.get_size_inches()[1]


# -- written files ---------------------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_write_reports_writes_a_valid_png_of_sensible_size(run_dir):
    paths = report.write_reports(run_dir)
    assert paths["boundary_map"] == run_dir / "boundary_map.png"
    w, h = _png_size(paths["boundary_map"])
    assert 400 <= w <= figure_mod.MAX_PIXELS and 200 <= h <= figure_mod.MAX_PIXELS
    img = __import__("matplotlib.image", fromlist=["imread"]).imread(paths["boundary_map"])
    assert img.shape[:2] == (h, w)


def test_write_reports_into_another_directory_leaves_the_run_untouched(run_dir, tmp_path):
    out = tmp_path / "out" / "nested"
    paths = report.write_reports(run_dir, out)
    assert set(paths) == {"boundary_map", "report"}
    assert all(p.parent == out and p.is_file() for p in paths.values())
    assert sorted(p.name for p in run_dir.iterdir()) == ["manifest.json", "verdicts.jsonl"]


def test_html_report_holds_every_wrong_case_and_fetches_nothing(run_dir):
    html = report.write_reports(run_dir)["report"].read_text()
    run = load_run(run_dir)
    for r in run.with_status(Status.WRONG, Status.ERROR):
        assert r.id in html
    assert "first bad flat index 4295032832" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert "<link" not in html and "<script" not in html
    assert re.search(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', html)


def test_html_report_shows_manifest_facts_and_tolerances(run_dir):
    html = report.write_reports(run_dir)["report"].read_text()
    for fact in ("2.13.0+cpu", "wrap32", "Test CPU", "2^32 = 4,096", "bmm/float16/contig/fwd", "0.004"):
        assert fact in html


def test_html_report_is_well_formed(run_dir):
    from html.parser import HTMLParser

    class Balance(HTMLParser):
        void = {"meta", "img", "br", "link"}

        def __init__(self):
            super().__init__()
            self.stack: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag not in self.void:
                self.stack.append(tag)

        def handle_endtag(self, tag):
            assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
            self.stack.pop()

    parser = Balance()
    parser.feed(report.write_reports(run_dir)["report"].read_text())
    assert parser.stack == []


def test_load_run_derives_a_missing_size_label_from_threshold_and_position(tmp_path):
    c = case(size="2^32-")
    del c["size"]
    (r,) = load_run(store(tmp_path, [line(c, OK)])).records
    assert r.size == "2^32-"


def test_html_report_colours_each_status(run_dir):
    html = report.write_reports(run_dir)["report"].read_text()
    for s in Status:
        assert f'class="st st-{s.value}"' in html
        assert f".st-{s.value} {{ background: {report.STATUS_COLOURS[s]}; }}" in html


def test_html_report_escapes_case_text(tmp_path):
    c = case()
    c["id"] = "bmm/<script>alert(1)</script>"
    html = report.render_html(load_run(store(tmp_path, [line(c, Verdict.error("a < b & c"))])))
    assert "<script>" not in html and "&lt;script&gt;" in html and "a &lt; b &amp; c" in html


def test_big_maps_are_also_split_per_op_family(run_dir, monkeypatch):
    monkeypatch.setattr(figure_mod, "MAX_PANELS_PER_FILE", 1)
    paths = report.write_reports(run_dir)
    assert paths["boundary_map_matmul"].is_file() and paths["boundary_map"].is_file()
    html = paths["report"].read_text()
    assert 'alt="boundary_map_matmul"' in html and 'alt="boundary_map"' not in html


def test_overview_cell_is_the_worst_verdict_of_the_ops_panel(tmp_path):
    from kernelaudit.sweep.report.grid import overview_grid

    lines = [line(case(size="2^31-"), OK), line(case(size="2^32+"), WRONG), line(case(layout="bT"), ERROR),
             line(case(op="matmul", size="2^31"), SKIP), line(case(op="matmul", size="2^32"), ERROR),
             line(case(direction="bwd"), OK)]
    g = overview_grid(boundary_grid(load_run(store(tmp_path, lines))))
    assert g.rows == ("bmm", "matmul")
    assert g.cols == ("elements float16 fwd", "elements float16 bwd")
    assert g.cells == ((Status.ERROR, Status.OK), (Status.ERROR, None))  # as a cell: error > wrong


def test_a_map_too_big_to_read_is_an_overview_and_family_parts_never_a_crash(run_dir, monkeypatch):
    # A full derived-op grid (5,777 panels) once asked for a few dots per inch, and FreeType
    # refused the sub-pixel text: a map under MIN_DPI is drawn as an overview plus parts.
    monkeypatch.setattr(figure_mod, "MAX_PIXELS", 30)   # nothing fits: every part is one row
    paths = report.write_reports(run_dir)
    assert paths["boundary_map"] == paths["boundary_map_overview"] == run_dir / "boundary_map.png"
    assert {"boundary_map_matmul_1", "boundary_map_matmul_2"} <= set(paths)  # bmm's row, matmul's row
    for name, path in paths.items():
        if name != "report":
            assert _png_size(path)[0] > 0
    html = paths["report"].read_text()
    assert 'alt="boundary_map_overview"' in html and 'alt="boundary_map_matmul_2"' in html
    assert html.index('alt="boundary_map_overview"') < html.index('alt="boundary_map_matmul_1"')


def test_a_map_is_cut_between_rows_only_as_far_as_legibility_needs(run_dir, monkeypatch):
    run = load_run(run_dir)
    grids = boundary_grid(run)
    assert figure_mod._in_parts(run, grids) == [grids]          # legible whole: one part
    monkeypatch.setattr(figure_mod, "MAX_PIXELS", 30)
    parts = figure_mod._in_parts(run, grids)
    assert [sorted({p.op for p in part}) for part in parts] == [["bmm"], ["matmul"]]
    assert {p: g for part in parts for p, g in part.items()} == grids


def test_reports_of_an_empty_run_say_nothing_was_recorded(tmp_path):
    d = store(tmp_path, [])
    paths = report.write_reports(d)
    assert _png_size(paths["boundary_map"])[0] > 0
    assert "None." in paths["report"].read_text()
    assert "Nothing recorded yet" in summary_text(load_run(d))


def test_report_package_exports_the_names_the_cli_uses():
    assert {"load_run", "print_summary", "write_reports", "boundary_grid"} <= set(report.__all__)
    assert all(hasattr(report, name) for name in report.__all__)


def test_summary_says_where_the_time_went_per_op_and_phase(tmp_path):
    timed = Verdict(Status.OK, "rel", 1e-4, 4e-3, details={"timing": {"inputs_s": 0.5, "op_s": 1.0, "judge_s": 2.0}})
    lines = [json.dumps({"case": case(size=s), "verdict": timed.to_json(), "elapsed_s": 3.5,
                         "recorded": "2026-12-02T10:00:01+00:00"}) for s in ("2^31", "2^32")]
    lines.append(line(case(op="matmul", size="2^32"), OK))  # 0.01 s, no phases recorded
    text = summary_text(load_run(store(tmp_path, lines)))
    assert "Where the time went" in text
    row = re.search(r"│ bmm\s+│\s+2\s+│\s+7\.0\s+│\s+1\.0\s+│\s+2\.0\s+│\s+4\.0\s+│ bmm/float16/contig/out/2\^31/fwd \(3\.50\)", text)
    assert row, text
    assert re.search(r"│ all\s+│\s+3\s+│\s+7\.0\s+│", text)


def test_a_derived_ops_findings_come_with_plain_torch_code_and_a_timeout_with_none(tmp_path):
    from kernelaudit.sweep.cases import GridSpec, grid

    (wrong,) = grid(GridSpec(ops=("nn.functional.softmin",), dtypes=("float16",), layouts=("contig",),
                             directions=("bwd",), thresholds=("2^32",), positions=("above",), scale=BITS))
    (slow,) = grid(GridSpec(ops=("nn.functional.layer_norm",), dtypes=("float32",), layouts=("contig",),
                            directions=("fwd",), thresholds=("2^32",), positions=("above",), scale=BITS))
    lines = [line(wrong.to_json(), WRONG),
             line(slow.to_json(), Verdict.error("timed out after 20 s (worker killed)", timed_out=True))]
    run = load_run(store(tmp_path, lines, device={"type": "cuda", "name": "Test GPU", "memory_bytes": 2**34}))
    text = summary_text(run)
    assert text.count("plain torch, the first case:") == 1          # the timeout says nothing of the op
    assert "out = torch.nn.functional.softmin(x0.movedim(0, 1), 0)" in text
    assert "dev, dt = 'cuda', torch.float16" in text and "y.backward(" in text
    narrow = summary_text(run, width=80)   # not wrapped mid-line: a pointer instead
    assert "torch.nn.functional.softmin(" not in narrow and "in report.html" in narrow
    html = report.render_html(run)
    assert html.count("plain torch, the first case") == 1 and "torch.nn.functional.softmin(" in html


def test_load_run_keeps_a_judged_verdict_over_a_later_skip_for_memory_but_not_over_other_skips(tmp_path):
    memory = Verdict.skipped("needs about 92.0 GiB, 66.8 GiB available", needed_bytes=98 * 2**30)
    run = load_run(store(tmp_path, [line(case(), WRONG), line(case(), memory),
                                    line(case(op="mm"), WRONG), line(case(op="mm"), SKIP)]))
    by_op = {r.op: r.status for r in run.records}
    assert by_op == {"bmm": Status.WRONG, "mm": Status.SKIPPED}
    assert any("for 1 skipped for want of memory" in n for n in run.notes)


def test_a_saved_map_holds_palette_colours_only_and_each_status_colour_exactly(run_dir):
    from matplotlib.colors import to_rgb
    from PIL import Image

    from kernelaudit.sweep.report.grid import STATUS_COLOURS

    path = report.write_reports(run_dir)["boundary_map"]
    img = Image.open(path)
    assert img.mode == "P"   # 8-bit colour indexes, not RGBA
    used = {rgb for _, rgb in img.convert("RGB").getcolors(maxcolors=256)}
    assert used <= set(figure_mod.map_palette())
    # the run holds ok, wrong and error cases: their cells keep their colours, bit for bit
    for status in (Status.OK, Status.WRONG, Status.ERROR):
        assert tuple(round(255 * x) for x in to_rgb(STATUS_COLOURS[status])) in used, status


def _timed(c: dict, op_s: float | None = None, timeout_s: float | None = None) -> str:
    """A record of case ``c`` that spent ``op_s`` in its op, or was killed there at ``timeout_s``."""
    if timeout_s is None:
        v = Verdict(Status.OK, "rel_max_err", 1e-4, 4e-3, None, None, "", {"timing": {"op_s": op_s, "judge_s": 0.1}})
    else:
        v = Verdict.error(f"timed out after {timeout_s:g} s (worker killed)",
                          timed_out=True, timeout_s=timeout_s, phase="op", phase_s=timeout_s)
    return line(c, v)


def test_cliffs_find_an_op_that_slows_or_hangs_past_a_limit_and_nothing_else(tmp_path):
    from kernelaudit.sweep.report.cliffs import cliffs

    lines = [
        _timed(case(op="steady", size="2^31-"), 6.0), _timed(case(op="steady", size="2^31+"), 6.1),
        _timed(case(op="slow", size="2^31-"), 2.0), _timed(case(op="slow", size="2^31+"), 30.0),
        _timed(case(op="hang", size="2^32-"), 0.02), _timed(case(op="hang", size="2^32+"), timeout_s=120.0),
        # a one-time cost (a jiterator compile past 2^31): 100x, but under a second
        _timed(case(op="compile", size="2^31-"), 0.006), _timed(case(op="compile", size="2^31+"), 0.9),
        # below timed out: no time to compare against
        _timed(case(op="both", size="2^32-"), timeout_s=20.0), _timed(case(op="both", size="2^32+"), timeout_s=20.0),
        line(case(op="skipped", size="2^31-"), SKIP), _timed(case(op="skipped", size="2^31+"), 50.0),
    ]
    run = load_run(store(tmp_path, lines))
    found = cliffs(run)
    assert [(c.above.op, c.timed_out) for c in found] == [("hang", True), ("slow", False)]
    hang, slow = found

    def sizes(c):   # a pair's sizes differ by a batch: per element, the ratio scales by them
        return c.below.crossing_numel / c.above.crossing_numel

    assert slow.ratio == pytest.approx(15 * sizes(slow)) and hang.ratio == pytest.approx(6000 * sizes(hang))
    assert slow.row()[4:] == ["2^31-", "2", "2^31+", "30", f"{15 * sizes(slow):.0f}"]
    assert hang.row()[7:] == [">= 120", f">= {6000 * sizes(hang):.0f}"]
    assert [c.above.op for c in cliffs(run, min_s=0.5)] == ["hang", "compile", "slow"]
    console = Console(width=160, record=True)
    print_summary(run, console)
    out = console.export_text()
    assert "Performance cliffs" in out and f">= {6000 * sizes(hang):.0f}" in out
    html = report.render_html(run)
    assert "Performance cliffs" in html and "&gt;= 120" in html


def test_a_pair_of_other_per_batch_shapes_is_no_cliff(tmp_path):
    """A resumed store may hold a grown case below a limit (2,045 x 2,045 matrices, fast
    per element) beside the case above still recorded with the sample's 5 x 5 ones and
    timed out: two different cases, not a slowdown past the limit."""
    from kernelaudit.sweep.report.cliffs import cliffs

    below, above = case(op="qr", size="2^31-"), case(op="qr", size="2^31+")
    below = {**below, "shapes": [[below["batch"], 2045, 2045]]}
    lines = [_timed(below, 0.5), _timed({**above, "shapes": [[above["batch"], 5, 5]]}, timeout_s=120.0)]
    assert cliffs(load_run(store(tmp_path, lines, name="mixed"))) == []
    lines[1] = _timed({**above, "shapes": [[above["batch"], 2045, 2045]]}, timeout_s=120.0)
    assert [c.above.op for c in cliffs(load_run(store(tmp_path, lines, name="same")))] == ["qr"]


def test_cases_waiting_on_a_longer_timeout_are_listed_with_the_time_their_op_projects(tmp_path):
    from kernelaudit.sweep.report.waiting import duration, total_line, waiting

    held = Verdict.skipped("not run: slow/float16/contig/out/2^31+/fwd timed out",
                           after_timeout="slow/float16/contig/out/2^31+/fwd")
    judged = case(op="slow", size="2^31-")
    lines = [
        _timed(judged, 99.9),                                        # 100 s with its judgement
        _timed(case(op="slow", size="2^31+"), timeout_s=20.0),       # timed out: projected ~100 s
        line(case(op="slow", size="2^32+"), held),                   # held back: projected ~200 s
        _timed(case(op="alone", size="2^32+"), timeout_s=20.0),      # nothing judged: no projection
        _timed(case(op="fine", size="2^32+"), 1.0),                  # judged: not waiting
    ]
    run = load_run(store(tmp_path, lines))
    slow, alone = waiting(run)
    per_element = 100.0 / judged["crossing_numel"]
    assert (slow.op, slow.timed_out, slow.held_back, slow.unknown, slow.source) == ("slow", 1, 1, 0, judged["id"])
    assert slow.projected == pytest.approx((per_element * case(op="slow", size="2^31+")["crossing_numel"],
                                            per_element * case(op="slow", size="2^32+")["crossing_numel"]))
    assert (alone.op, alone.timed_out, alone.projected, alone.unknown) == ("alone", 1, (), 1)
    assert total_line([slow, alone]) == f"3 cases: 2 projected, {duration(slow.total_s)} together " \
                                        f"(the longest {duration(max(slow.projected))}), 1 without a projection"
    assert [duration(s) for s in (0.4, 100.0, 152.0, 2460.0, 7200.0, 588240.0)] == [
        "0 s", "100 s", "3 min", "41 min", "2.0 h", "163.4 h"]
    console = Console(width=200, record=True)
    print_summary(run, console)
    out = console.export_text()
    assert "Waiting on a longer timeout" in out and f"{slow.total_s:,.0f}" in out
    assert "Waiting on a longer timeout" in report.render_html(run)
