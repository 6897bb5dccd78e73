"""The demo: a small transformer classifier on one oversized batch, with and without the guard."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def demo():
    return _load("guard_demo")


def test_shipped_dataset_is_what_the_generator_writes():
    gen = _load("make_sentiment_data")
    rows = gen.make()
    assert (EXAMPLES / "data" / "sentiment.tsv").read_text() == "".join(f"{a}\t{b}\n" for a, b in rows)
    assert {a for a, _ in rows} == {"positive", "negative", "neutral"} and len(rows) == 600


def test_guard_removes_every_corrupted_prediction_of_the_oversized_batch(demo):
    res = demo.run(scale=20, verbose=False)
    assert res["heldout_accuracy"] >= 0.9
    assert res["scores_elements"] > 2**20
    faulty, guarded, honest = res["faulty"], res["guarded"], res["honest"]
    assert faulty["corrupted_fraction"] >= 0.1           # the fault model corrupts a visible share
    assert faulty["distribution"] != honest["distribution"]
    assert guarded["corrupted_fraction"] == 0.0          # and the guard leaves none
    assert guarded["distribution"] == honest["distribution"]
    assert guarded["guard"]["fixed"] >= 1 and guarded["guard"]["passed"] >= 1
