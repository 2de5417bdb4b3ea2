"""``ragbound decide`` and ``ragbound calibrate --conversations``: chats decided at their last
(or every) user turn, the reading a calibration was made with recorded and used by default,
tripwires across turns, and each bad conversation one ``error:`` line naming the file and line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragbound.gate import Gate
from tests.cli.runner import run
from tests.conversations.test_files import DIALOGUE, DOC2DIAL, assistant, user, write
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

BEES = {
    "id": "bees",
    "messages": [
        user("How do bees tell each other where food is?"),
        assistant("They dance a waggle dance on the comb."),
        user("What else happens in the hive?"),
    ],
}
SWITCH = {
    "messages": [
        {"role": "system", "content": "Answer from the documents."},
        user([{"type": "text", "text": "How does a steam locomotive work?"}]),
        assistant("It burns coal to boil water."),
        user("What is the capital of Australia?"),
    ]
}
LOGGED = {**BEES, "messages": [*BEES["messages"], assistant("The queen lays eggs.")]}


@pytest.fixture(scope="module")
def kb(gated_kb: Path) -> Path:
    """The bees-and-trains knowledge base calibrated on standalone questions (no reading
    recorded), with tripwires."""
    return gated_kb


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("chats") / "chats.jsonl", BEES, SWITCH, DIALOGUE)


def decide(monkeypatch, capsys, *args: str) -> list[dict]:
    code, out, err = run(monkeypatch, capsys, "decide", *args, "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_each_conversation_is_decided_at_its_last_user_turn(monkeypatch, capsys, kb, chats):
    decisions = decide(monkeypatch, capsys, str(kb), "--conversations", str(chats))
    assert [d["query"] for d in decisions] == [
        "What else happens in the hive?",
        "What is the capital of Australia?",
        "yes",
    ]
    turns = [d["conversation"] for d in decisions]
    assert [(t["id"], t["turn"], t["reading"]) for t in turns] == [
        ("bees", 1, "follow"),
        (None, 1, "follow"),
        ("d1", 1, "follow"),
    ]
    assert decisions[1]["action"] == "abstain"  # a topic switch stays out of knowledge
    assert decisions[1]["test"]["query"] == "What is the capital of Australia?"
    assert turns[2]["read_turns"] == 2  # "yes" follows: searched with the turn before
    assert decisions[2]["action"] == "answer"
    assert all(len(d["neighbours"]) == 3 for d in decisions)  # --evidence 3


def test_the_table_names_the_conversation_and_the_turn(monkeypatch, capsys, kb, chats):
    code, out, err = run(monkeypatch, capsys, "decide", str(kb), "--conversations", str(chats))
    assert code == 0, err
    lines = out.splitlines()
    assert "conversations read with follow" in lines[0]
    assert lines[4:7] == [
        "line 2, user turn 2:",
        "What is the capital of Australia?",
        lines[6],
    ]
    assert lines[6].startswith("    p-value ") and "out of knowledge" in lines[6]
    assert "d1, user turn 2, searched with the last 2 user turns:" in lines
    assert all(len(line) <= 80 for line in lines)


def test_every_turn_and_another_reading(monkeypatch, capsys, kb, chats, tmp_path):
    log = write(tmp_path / "log.jsonl", LOGGED, DIALOGUE)  # logged: each ends with the answer
    decisions = decide(
        monkeypatch, capsys, str(kb), "--conversations", str(log), "--every-turn", "--reading",
        "last", "--evidence", "1",
    )  # fmt: skip
    assert [(d["conversation"]["id"], d["conversation"]["turn"]) for d in decisions] == [
        ("bees", 0),
        ("bees", 1),
        ("d1", 0),
        ("d1", 1),
    ]
    assert {d["conversation"]["reading"] for d in decisions} == {"last"}
    assert {d["conversation"]["read_turns"] for d in decisions} == {1}
    assert decisions[3]["test"]["query"] == "yes"
    assert all(len(d["neighbours"]) == 1 for d in decisions)


def test_a_forbidden_earlier_turn_is_reported(monkeypatch, capsys, kb, tmp_path):
    chat = {"messages": [user(UNSAFE[0]), assistant("No."), user("What do worker bees make?")]}
    first = {"messages": chat["messages"][:1]}
    path = write(tmp_path / "chat.jsonl", first, chat)
    decisions = decide(monkeypatch, capsys, str(kb), "--conversations", str(path))
    assert decisions[0]["action"] == "reject"
    later = decisions[1]  # the forbidden turn dropped, the later one decided on its merits
    assert later["action"] != "reject" and later["query"] == "What do worker bees make?"
    assert later["conversation"]["dropped"] == [0]
    code, out, err = run(monkeypatch, capsys, "decide", str(kb), "--conversations", str(path))
    assert code == 0, err
    assert "    forbidden: harm" in out.splitlines()


def test_calibrate_on_conversations_records_the_reading(monkeypatch, capsys, kb, tmp_path):
    kb_dir = tmp_path / "kb"
    shutil.copytree(kb, kb_dir)
    questions = tmp_path / "questions.txt"
    questions.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE) + "\n")
    log = write(tmp_path / "log.jsonl", LOGGED, DIALOGUE)
    args = ("calibrate", str(kb_dir), "--conversations", str(log), "--k", "4")
    code, out, err = run(monkeypatch, capsys, *args, "--queries", str(questions), "--reading",
                         "recent", "--json")  # fmt: skip
    assert code == 0, err
    info = json.loads(out)
    n_questions = len(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    assert info["n_queries"] == n_questions + 4  # and every user turn of the two chats
    assert info["reading"] == "recent"
    assert info["conversations"] == {"source": str(log), "n_conversations": 2, "n_turns": 4}
    manifest = json.loads((kb_dir / "calibration" / "manifest.json").read_text())
    assert manifest["reading"] == "recent"
    queries = (kb_dir / "calibration").glob("*.queries.jsonl")
    held = [json.loads(line)["query"] for line in next(queries).read_text().splitlines()]
    assert held[-1] == "What do worker bees make? yes"  # the turn as recent reads it
    assert Gate.load(kb_dir).reading == "recent"  # the calibration's reading by default
    assert Gate.load(kb_dir, reading="last").reading == "last"

    # decide reads with the calibration's reading, and warns when told another
    logged = ("--conversations", str(log), "--every-turn")
    decisions = decide(monkeypatch, capsys, str(kb_dir), *logged)
    assert {d["conversation"]["reading"] for d in decisions} == {"recent"}
    code, _, err = run(monkeypatch, capsys, "decide", str(kb_dir), *logged, "--reading", "last")
    assert code == 0 and "were read with recent" in err

    # conversations alone; the table says how they were read
    code, out, err = run(monkeypatch, capsys, *args[:-2], "--k", "2")
    assert code == 0, err
    assert "conversations: 4 user turns of 2 conversations, read with follow" in out.replace(
        "\n  ", " "
    )


def test_a_calibration_of_standalone_questions_records_no_reading(kb):
    manifest = json.loads((kb / "calibration" / "manifest.json").read_text())
    assert manifest["reading"] is None
    assert Gate.load(kb).reading == "follow"


def test_an_old_calibration_without_the_field_loads_with_follow(kb, tmp_path):
    old = tmp_path / "kb"
    shutil.copytree(kb, old)
    path = old / "calibration" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["reading"]
    path.write_text(json.dumps(manifest))
    assert Gate.load(old).reading == "follow"


def test_the_rewrite_reading_calls_the_llm(monkeypatch, capsys, kb, chats):
    from ragbound.cli import common
    from tests.llm.llm_fakes import ScriptedLLM

    llm = ScriptedLLM(responder=lambda messages, params: "What do bees do in their hive?")
    monkeypatch.setattr(common, "cached_llm", lambda spec: llm)
    decisions = decide(monkeypatch, capsys, str(kb), "--conversations", str(chats), "--reading",
                      "rewrite", "--llm", "openai:fake")  # fmt: skip
    assert decisions[0]["test"]["query"] == "What do bees do in their hive?"
    assert decisions[0]["conversation"]["reading"] == "rewrite"
    assert len(llm.calls) == 3  # one per later turn


BAD = {
    "empty messages": ({"messages": []}, ":2: no messages"),
    "no user turn": ({"messages": [assistant("Hello.")]}, ":2: no user message to decide"),
    "last turn from the assistant": (
        {"messages": [user("Why?"), assistant("Because.")]},
        ":2: the last message is the assistant's; nothing new to decide (a conversation ends "
        "with the user's turn); --every-turn decides every user turn of a logged chat",
    ),
    "non-text parts only": (
        {"messages": [user([{"type": "input_image", "image_url": "http://x/a.png"}])]},
        ":2, message 1: the last user message has no text to decide",
    ),
    "unknown role": (
        {"messages": [{"role": "robot", "content": "beep"}, user("Why?")]},
        ":2, message 1: unknown role 'robot'",
    ),
    "1,000 turns": (
        {"messages": [user(f"{i}") if i % 2 else assistant(f"{i}") for i in range(1000)]},
        ":2: 1,000 messages; at most 256",
    ),
    "a 1 MB history": (
        {"messages": [user("x " * 500_000), assistant("ok"), user("Why?")]},
        ":2: 1,000,005 characters of text; at most 200,000",
    ),
}


# calibrate reads logged chats: the answer after the last user turn is left out, not refused
BAD_ROWS = [
    pytest.param(command, record, fragment, id=f"{command} {name}")
    for command in ("decide", "calibrate")
    for name, (record, fragment) in BAD.items()
    if command == "decide" or name != "last turn from the assistant"
]


@pytest.mark.parametrize(("command", "record", "fragment"), BAD_ROWS)
def test_a_bad_conversation_is_one_error_line(
    monkeypatch, capsys, kb, tmp_path, command, record, fragment
):
    path = write(tmp_path / "bad.jsonl", {"messages": [user("What is a gauge?")]}, record)
    code, out, err = run(monkeypatch, capsys, command, str(kb), "--conversations", str(path))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {path}:2") and fragment in lines[0]
    assert out == ""


USAGE = {
    ("decide", "--conversations", "{chats}", "--reading", "nosuch"): "'--reading': must be one of",
    ("decide", "--conversations", "{chats}", "--llm", "local"): "--llm is for the rewrite reading",
    ("calibrate",): "give in-knowledge questions: --queries FILE, --conversations FILE or both",
    ("calibrate", "--reading", "last", "--queries", "{chats}"): "give --conversations FILE",
    ("calibrate", "--conversations", "{chats}", "--real-queries", "{chats}"): "give --queries",
}


@pytest.mark.parametrize(("args", "fragment"), USAGE.items(), ids=[" ".join(a) for a in USAGE])
def test_options_that_do_not_go_together(monkeypatch, capsys, kb, chats, args, fragment):
    argv = [args[0], str(kb), *(arg.format(chats=chats) for arg in args[1:])]
    code, _, err = run(monkeypatch, capsys, *argv)
    assert code == 2 and err.startswith("error: ") and fragment in err, err


@pytest.mark.skipif(not DOC2DIAL.is_file(), reason=f"doc2dial is not in {DOC2DIAL.parent}")
def test_the_real_doc2dial_file_is_checked_turn_by_turn(monkeypatch, capsys, kb, tmp_path):
    lines = DOC2DIAL.read_text(encoding="utf-8").splitlines()[:3]
    path = tmp_path / "dialogues.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dialogues = [json.loads(line) for line in lines]
    decisions = decide(monkeypatch, capsys, str(kb), "--conversations", str(path), "--every-turn")
    expected = [
        (d["id"], i, turn["text"].strip())
        for d in dialogues
        for i, turn in enumerate(t for t in d["turns"] if t["role"] == "user")
    ]
    found = [(d["conversation"]["id"], d["conversation"]["turn"], d["query"]) for d in decisions]
    assert found == expected
