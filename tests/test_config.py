"""Every knob is read through its declaration in kernelaudit.config."""

from __future__ import annotations

import pytest

from kernelaudit.config import FUSED_SUMMARY, KNOBS, PROJECT_AT_GENERATION, fused_enabled, interpreter_requested
from kernelaudit.errors import InvalidArgument


def test_a_knob_outside_its_choices_names_the_variable_and_the_allowed_values(monkeypatch):
    monkeypatch.setenv(FUSED_SUMMARY.name, "yes")
    with pytest.raises(InvalidArgument, match="KERNELAUDIT_FUSED_SUMMARY='yes': allowed values are auto, 0, 1"):
        fused_enabled(FUSED_SUMMARY, "cuda")


@pytest.mark.parametrize("value, cpu, cuda", [("auto", False, True), ("1", True, True), ("0", False, False)])
def test_auto_switches_mean_cuda_only_and_0_1_force_them(monkeypatch, value, cpu, cuda):
    monkeypatch.setenv(FUSED_SUMMARY.name, value)
    assert (fused_enabled(FUSED_SUMMARY, "cpu"), fused_enabled(FUSED_SUMMARY, "cuda")) == (cpu, cuda)


def test_unset_knobs_take_their_declared_defaults(monkeypatch):
    monkeypatch.delenv(PROJECT_AT_GENERATION.name, raising=False)
    assert PROJECT_AT_GENERATION.flag() is True
    assert all(k.name == name and k.doc for name, k in KNOBS.items())


@pytest.mark.parametrize("value, on", [("1", True), ("True", True), ("on", True), ("0", False), ("", False)])
def test_the_interpreter_switch_accepts_tritons_own_spellings(monkeypatch, value, on):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert interpreter_requested() is on
