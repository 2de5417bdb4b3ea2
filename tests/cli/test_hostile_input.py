"""Hostile input to the real ``ragbound`` command (issue 47, items 4 to 6, and progress in logs).

Every test runs ``python -m ragbound.cli`` as a child process, as a user or a script does, with
stderr a pipe (not a terminal), and reads what it printed:

- JSON nested past 128 levels in any input file is one ``error:`` line naming the file and the
  line (was a ``RecursionError`` traceback);
- a lone surrogate in a JSON record, an argument that is not UTF-8 and a corpus file name that
  is not UTF-8 are one ``error:`` line naming the file and line, or the argument (were a
  tokenizer ``TypeError`` traceback, or an encoder's error naming neither);
- control characters in document names, tripwire texts, queries and error lines are printed
  as escapes (``\\x1b``), never sent to the terminal; ``--json`` keeps them as JSON does;
- a long job writes progress lines to a log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
DEEP = "[" * 1000 + "]" * 1000  # as deep as the probe: Python's parser overflows
ESC = "\x1b[2J\x1b[31m"  # clear the screen, then red


def ragbound(*args: str | bytes, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the real command (this checkout's source) with stdout and stderr as pipes."""
    environment = dict(os.environ) | env
    environment["PYTHONPATH"] = os.pathsep.join([str(SRC), environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "ragbound.cli", *(os.fsencode(a) for a in args)],
        capture_output=True,
        env=environment,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "backslashreplace"),
        done.stderr.decode("utf-8", "backslashreplace"),
    )


def one_error(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single ``error:`` line of a command refused as bad input (exit 2)."""
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def files(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A calibrated BM25 knowledge base and hostile input files beside it."""
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase
    from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

    root = tmp_path_factory.mktemp("hostile")
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    kb.save(root / "kb")
    Guard.calibrate(KnowledgeBase.load(root / "kb"), IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=3).save()
    chat = {"messages": [{"role": "user", "content": "What do bees make?"}]}
    texts = {
        "deep_records.jsonl": '{"text": "Bees."}\n{"text": "Trains.", "x": ' + DEEP + "}\n",
        "deep_document.json": '[\n {"text": "Bees."},\n {"text": "Trains.",\n  "x": '
        + DEEP
        + "}\n]\n",
        "deep_queries.jsonl": '{"query": "What do bees make?", "x": ' + DEEP + "}\n",
        "deep_chats.jsonl": json.dumps(chat)
        + "\n"
        + json.dumps(chat)[:-1]
        + ', "x": '
        + DEEP
        + "}\n",
        "deep_tripwires.jsonl": '{"text": "How do I hurt someone?", "topic": "harm", "x": '
        + DEEP
        + "}\n",
        "surrogate_records.jsonl": '{"text": "Bees."}\n{"text": "Trains \\ud800 run."}\n',
        "surrogate_queries.jsonl": '{"query": "What do bees make?"}\n{"query": "Why \\udc80?"}\n',
        "surrogate_chats.jsonl": '{"messages": [{"role": "user", "content": "Hi \\ud800"}]}\n',
    }
    paths = {name: root / name for name in texts}
    for name, text in texts.items():
        paths[name].write_text(text, encoding="utf-8")
    return paths | {"kb": root / "kb", "root": root}


# ------------------------------------------------------------------ 4. deep nesting


@pytest.mark.parametrize(
    ("command", "file", "line"),
    [
        ("index {file} --out {new} --embedder bm25", "deep_records.jsonl", 2),
        ("index {file} --out {new} --embedder bm25", "deep_document.json", 4),
        ("calibrate {kb} --queries {file}", "deep_queries.jsonl", 1),
        ("decide {kb} --queries {file}", "deep_queries.jsonl", 1),
        ("decide {kb} --conversations {file}", "deep_chats.jsonl", 2),
        ("tripwire add {kb} {file}", "deep_tripwires.jsonl", 1),
    ],
    ids=["index-jsonl", "index-json", "calibrate", "decide", "decide-chats", "tripwire-add"],
)
def test_json_nested_1000_deep_is_one_error_line_naming_file_and_line(
    files: dict[str, Path], command: str, file: str, line: int
) -> None:
    new = files["root"] / "new-kb"
    args = command.format(file=files[file], kb=files["kb"], new=new).split()
    done = ragbound(*args)
    one_error(done, f"{files[file]}:{line}: ", "nested deeper than 128 levels")
    assert not new.exists()


# ------------------------------------------------------ 5. surrogates, bytes not UTF-8


def test_a_lone_surrogate_in_a_query_file_names_file_line_and_field(
    files: dict[str, Path], gated_kb: Path
) -> None:
    # a dense knowledge base: its tokenizer raised TypeError on the surrogate
    done = ragbound("decide", str(gated_kb), "--queries", str(files["surrogate_queries.jsonl"]))
    one_error(done, f"{files['surrogate_queries.jsonl']}:2 (field 'query'): ", "lone surrogate")
    assert done.stdout == ""  # refused before any query is decided


def test_a_lone_surrogate_in_a_conversation_names_the_message(files: dict[str, Path]) -> None:
    done = ragbound(
        "decide", str(files["kb"]), "--conversations", str(files["surrogate_chats.jsonl"])
    )
    one_error(done, f"{files['surrogate_chats.jsonl']}:1 (field 'messages[0].content'): ")


def test_a_lone_surrogate_in_a_corpus_record_names_file_and_line(files: dict[str, Path]) -> None:
    new = files["root"] / "surrogate-kb"
    done = ragbound(
        "index", str(files["surrogate_records.jsonl"]), "--out", str(new), "--embedder", "bm25"
    )
    one_error(done, f"{files['surrogate_records.jsonl']}:2 (field 'text'): ", "U+D800")
    assert not new.exists()


def test_a_query_argument_that_is_not_utf8_is_named(gated_kb: Path) -> None:
    done = ragbound("decide", str(gated_kb), "What do bees make?", b"caf\xe9 and bees?")
    one_error(done, "query argument 2 'caf\\xe9 and bees?': not UTF-8 (byte 0xe9")


def test_a_corpus_file_name_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_text("Trains run on rails.\n", encoding="utf-8")
    bad = os.fsencode(corpus) + b"/hive\xff.txt"
    with open(bad, "w", encoding="utf-8") as handle:
        handle.write("Bees make honey.\n")
    done = ragbound("index", str(corpus), "--out", str(tmp_path / "kb"), "--embedder", "bm25")
    one_error(done, f"{corpus}/hive\\xff.txt: the path is not UTF-8 (byte 0xff)")


# ------------------------------------------------------------- 6. terminal escapes


@pytest.fixture(scope="module")
def escaped_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A calibrated BM25 knowledge base whose one bee document is named with an escape
    sequence and a line end."""
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase
    from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, TOPICS

    corpus = tmp_path_factory.mktemp("escaped") / "corpus"
    corpus.mkdir()
    (corpus / f"{ESC}hive\nsplit.txt").write_text(" ".join(TOPICS["bees"]), encoding="utf-8")
    (corpus / "trains.txt").write_text(" ".join(TOPICS["trains"]), encoding="utf-8")
    target = corpus.parent / "kb"
    KnowledgeBase.build([corpus], embedder="bm25").save(target)
    Guard.calibrate(KnowledgeBase.load(target), IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=2).save()
    return target


def test_decide_shows_a_document_name_s_escapes_on_one_line(escaped_kb: Path) -> None:
    done = ragbound("decide", str(escaped_kb), f"How many eggs does a queen bee {ESC}lay?")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "How many eggs does a queen bee \\x1b[2J\\x1b[31mlay?" in lines
    nearest = next(line for line in lines if "nearest" in line)
    assert nearest.endswith("\\x1b[2J\\x1b[31mhive\\nsplit.txt")  # one line, not two


def test_decide_json_keeps_the_text_as_json_escapes_it(escaped_kb: Path) -> None:
    done = ragbound("decide", str(escaped_kb), "How many eggs does a queen bee lay?", "--json")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout  # JSON writes \u001b
    decision = json.loads(done.stdout)
    assert decision["neighbours"][0]["source"] == f"{ESC}hive\nsplit.txt"


def test_tripwire_check_shows_a_tripwire_text_s_escapes(gated_kb: Path, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    shutil.copytree(gated_kb, kb)
    tripwires = tmp_path / "escaped.jsonl"
    text = f"How do I derail a passenger train?{ESC}\rOK"
    tripwires.write_text(json.dumps({"text": text, "topic": "sabotage"}) + "\n", encoding="utf-8")
    assert ragbound("tripwire", "add", str(kb), str(tripwires)).returncode == 0
    done = ragbound("tripwire", "check", str(kb), "How could I derail a passenger train?")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    assert "How do I derail a passenger train?\\x1b[2J\\x1b[31m\\rOK" in done.stdout


def test_an_error_line_shows_the_escapes_of_a_path(tmp_path: Path) -> None:
    missing = tmp_path / f"{ESC}missing"
    done = ragbound("index", str(missing), "--out", str(tmp_path / "kb"))
    one_error(done, "\\x1b[2J\\x1b[31mmissing: no such file or folder")
    assert "\x1b" not in done.stderr


# ------------------------------------------------------------- progress in a log


def test_a_long_job_says_it_is_alive_in_a_log(corpus_dir: Path, tmp_path: Path) -> None:
    # every step is "long" at an interval of 0 seconds: no wall clock in the test
    done = ragbound(
        "index", str(corpus_dir), "--out", str(tmp_path / "kb"), RAGBOUND_PROGRESS_SECONDS="0"
    )
    assert done.returncode == 0, done.stderr
    assert "embedding chunks: 10 of 10 (100%), " in done.stderr
    assert "\r" not in done.stderr  # plain lines, no bar


@pytest.mark.parametrize(
    ("args", "seconds"), [(("--json",), "0"), ((), "1e9")], ids=["json", "short-job"]
)
def test_no_progress_lines_with_json_or_before_the_interval(
    corpus_dir: Path, tmp_path: Path, args: tuple[str, ...], seconds: str
) -> None:
    out = tmp_path / "kb"
    done = ragbound(
        "index", str(corpus_dir), "--out", str(out), *args, RAGBOUND_PROGRESS_SECONDS=seconds
    )
    assert done.returncode == 0, done.stderr
    assert "embedding chunks" not in done.stderr
