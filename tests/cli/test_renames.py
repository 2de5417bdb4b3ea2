"""The CLI spellings renamed for one meaning each still work for a release, with a note on
stderr: ``index --store`` (now ``--backing``), ``score`` (now ``test-log``) and ``check
--conversations`` (now ``decide``); the old ones are hidden from --help and docs/cli.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.cli.docs import render
from tests.cli.runner import run, write_log
from tests.corpus.test_conversations import assistant, user, write
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

CHAT = {
    "id": "bees",
    "messages": [
        user("How do bees tell each other where food is?"),
        assistant("They dance a waggle dance on the comb."),
        user("What else happens in the hive?"),
    ],
}


def test_the_old_spellings_are_hidden_and_the_new_ones_documented(monkeypatch, capsys) -> None:
    code, out, _ = run(monkeypatch, capsys, "--help")
    assert code == 0 and "test-log" in out and "decide" in out
    assert "│ score " not in out
    reference = render()
    assert "## `ragbound test-log`" in reference and "## `ragbound decide`" in reference
    assert "## `ragbound score`" not in reference
    assert "--backing" in reference and "`--store" not in reference


def test_index_store_is_backing_with_a_note(monkeypatch, capsys, corpus_dir, tmp_path) -> None:
    url = "postgresql://u@127.0.0.1:1/db"
    args = ["index", str(corpus_dir), "--out", str(tmp_path / "new")]
    code, _, err = run(monkeypatch, capsys, *args, "--store", url)
    assert code == 2 and "cannot reach" in err  # the URL went where --backing's goes
    assert err.startswith("note: --store is deprecated, use --backing; removed in the next")
    code, _, err = run(monkeypatch, capsys, *args, "--store", "mysql://u@h/db")
    assert code == 2 and "not a postgresql:// URL" in err  # validated as --backing is
    code, _, err = run(monkeypatch, capsys, *args, "--store", url, "--backing", url)
    assert code == 2 and "give --backing only" in err


def test_score_is_test_log_with_a_note(monkeypatch, capsys, gated_kb: Path, tmp_path) -> None:
    log = write_log(tmp_path / "log.jsonl", IN_KNOWLEDGE[:3] + OUT_OF_KNOWLEDGE[:2])
    rows = {}
    for command in ("test-log", "score"):
        out = tmp_path / f"{command}.jsonl"
        code, _, err = run(monkeypatch, capsys, command, str(gated_kb), str(log), "--out", str(out))
        assert code == 0, err
        assert ("ragbound score is deprecated, use ragbound test-log" in err) == (
            command == "score"
        )
        rows[command] = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows["score"] == rows["test-log"]


def test_check_conversations_is_decide_with_a_note(monkeypatch, capsys, gated_kb, tmp_path) -> None:
    chats = write(tmp_path / "chats.jsonl", CHAT)
    found = {}
    for command in ("decide", "check"):
        code, out, err = run(
            monkeypatch, capsys, command, str(gated_kb), "--conversations", str(chats), "--json"
        )
        assert code == 0, err
        noted = "ragbound check --conversations is deprecated, use ragbound decide" in err
        assert noted == (command == "check")
        found[command] = [json.loads(line) for line in out.splitlines()]
    decided, checked = found["decide"], found["check"]
    assert [(d["action"], d["query"]) for d in checked] == [
        (d["action"], d["query"]) for d in decided
    ]
    assert decided[0]["test"]["p_value"] == pytest.approx(checked[0]["test"]["p_value"])
