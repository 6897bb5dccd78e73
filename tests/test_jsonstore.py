"""kernelaudit.jsonstore: the crash-safe JSON rules the sweep's and the campaign's stores share."""

from __future__ import annotations

import json
import os

import pytest

from kernelaudit.errors import InvalidArgument
from kernelaudit.jsonstore import (append_jsonl, count_lines, read_json, read_jsonl, set_aside_torn,
                                   write_json_atomic)


def test_write_json_atomic_round_trips_sorted_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "manifest.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    write_json_atomic(path, {"b": 2, "a": {"z": 0, "y": 1}})
    assert read_json(path) == {"b": 2, "a": {"z": 0, "y": 1}}
    assert path.read_text().index('"a"') < path.read_text().index('"b"')  # sort_keys, as both stores wrote
    assert sorted(os.listdir(tmp_path)) == ["manifest.json"]


def test_write_json_atomic_keeps_the_old_document_when_the_new_one_cannot_be_written(tmp_path):
    path = tmp_path / "manifest.json"
    write_json_atomic(path, {"run": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"run": object()})  # not JSON: fails before the rename
    assert read_json(path) == {"run": 1}
    assert sorted(os.listdir(tmp_path)) == ["manifest.json"]


def test_read_json_names_the_file_that_does_not_parse(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text('{"cut short": ')
    with pytest.raises(InvalidArgument, match=r"Cannot read .*manifest\.json"):
        read_json(path)


def test_append_then_read_jsonl_with_default_and_line_numbers(tmp_path):
    path = tmp_path / "log.jsonl"
    assert read_jsonl(path) == ([], [])  # missing reads as empty
    append_jsonl(path, {"k": 1})
    append_jsonl(path, {"k": (2, 3)}, default=list)
    append_jsonl(path, {"s": {4}}, default=sorted)
    assert read_jsonl(path) == ([(1, {"k": 1}), (2, {"k": [2, 3]}), (3, {"s": [4]})], [])


def test_a_torn_last_line_is_read_apart_then_set_aside_and_the_next_record_starts_clean(tmp_path):
    path, torn_path = tmp_path / "log.jsonl", tmp_path / "log.torn.jsonl"
    path.write_text('{"b": 1, "a": 0}\n\n{"a": 2}\n{"a": 3, "cut')  # a process killed mid-write
    parsed, torn = read_jsonl(path)
    assert parsed == [(1, {"b": 1, "a": 0}), (3, {"a": 2})] and torn == [(4, '{"a": 3, "cut')]
    assert set_aside_torn(path, torn_path, sort_keys=True) == 1
    assert path.read_text() == '{"a": 0, "b": 1}\n{"a": 2}\n'
    assert [json.loads(x) for x in torn_path.read_text().splitlines()] == [{"line": 4, "text": '{"a": 3, "cut'}]
    assert count_lines(torn_path) == 1
    append_jsonl(path, {"a": 4})
    assert [obj for _, obj in read_jsonl(path)[0]] == [{"a": 0, "b": 1}, {"a": 2}, {"a": 4}]


def test_set_aside_torn_leaves_a_clean_log_untouched_and_ends_an_unterminated_one(tmp_path):
    path, torn_path = tmp_path / "log.jsonl", tmp_path / "log.torn.jsonl"
    assert set_aside_torn(path, torn_path) == 0 and not path.exists()  # missing: nothing to do
    path.write_text('{"b": 1, "a": 0}\n')
    assert set_aside_torn(path, torn_path) == 0
    assert path.read_text() == '{"b": 1, "a": 0}\n' and not torn_path.exists()
    path.write_text('{"a": 0}')  # whole but without its newline: the next append would join it
    assert set_aside_torn(path, torn_path) == 0
    assert path.read_text() == '{"a": 0}\n' and count_lines(torn_path) == 0
