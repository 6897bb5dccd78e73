"""Mutation operators: each one changes its example into a different program that parses."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from kernelaudit.errors import InvalidArgument
from kernelaudit.zoo.mutate.operators import FAMILIES, OPERATORS, get_operators, operator_table


def test_at_least_25_operators_in_known_families():
    assert len(OPERATORS) >= 25
    assert len({op.name for op in OPERATORS}) == len(OPERATORS)
    assert {op.family for op in OPERATORS} <= set(FAMILIES)


@pytest.mark.parametrize("op", OPERATORS, ids=lambda op: op.name)
def test_operator_changes_its_example_into_a_parseable_different_program(op):
    tree = cst.parse_module(op.example)
    n = op.sites(tree)
    assert n >= 1, f"{op.name} has no site in its own example"
    for site in range(n):
        out = op.apply(tree, site).code
        assert out != op.example
        ast.parse(out)  # valid Python
    with pytest.raises(IndexError):
        op.apply(tree, n)


def test_table_rows_show_the_change():
    rows = operator_table()
    assert len(rows) == len(OPERATORS)
    for name, family, desc, before, after in rows:
        assert before != after and desc, name


def test_scope_limits_sites_to_the_named_definitions():
    src = "def a(x):\n    return x + 1\n\n\ndef b(x):\n    return x + 2\n"
    op = get_operators("add-to-sub")[0]
    tree = cst.parse_module(src)
    assert op.sites(tree) == 2
    assert op.sites(tree, scope=("b",)) == 1
    assert "x - 2" in op.apply(tree, 0, scope=("b",)).code and "x + 1" in op.apply(tree, 0, scope=("b",)).code


def test_triton_only_operators_leave_host_code_alone():
    op = get_operators("load-fp16")[0]
    host = "def f(x):\n    return tl.load(x)\n"
    kernel = "@triton.jit\ndef f(x):\n    return tl.load(x)\n"
    assert op.sites(cst.parse_module(host)) == 0
    assert op.sites(cst.parse_module(kernel)) == 1


def test_operator_selection_names_the_allowed_values():
    assert {op.family for op in get_operators("precision")} == {"precision"}
    with pytest.raises(InvalidArgument, match="--operators.*allowed values"):
        get_operators("no-such-operator")
