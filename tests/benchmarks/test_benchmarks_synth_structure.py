"""benchmarks/synth_structure.py end to end on a small corpus, the LLM a scripted double."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import datasets
from benchmarks.synth_structure import check_part, llm_part, markdown, structure_part
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams
from tests.llm.llm_fakes import ScriptedLLM
from tests.texts import (
    IN_KNOWLEDGE,
    MORE_IN_KNOWLEDGE,
    MORE_OUT_OF_KNOWLEDGE,
    OUT_OF_KNOWLEDGE,
    TOPICS,
)


def paragraph_kb(tmp_path: Path) -> tuple[KnowledgeBase, list[str]]:
    """Each topic a 'paper' of one record per sentence, ``id`` field ``TOPIC-i``, no document
    field; document ids from file and line, as the benchmark loads its corpus."""
    path = tmp_path / "paragraphs.jsonl"
    records = [
        {"id": f"{topic}-{i}", "text": sentence}
        for topic, sentences in TOPICS.items()
        for i, sentence in enumerate(sentences)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    kb = KnowledgeBase.build([path], embedder="bm25", id_field=datasets.CORPUS_IDS)
    return kb, [r["id"].split("-")[0] for r in records]


def topic_question(messages: list[ChatMessage], params: GenerationParams) -> str:
    """A distinct question per call, about bees or trains as the context is."""
    subject = "honey bees" if "bee" in messages[-1].content else "electric trains"
    return json.dumps({"question": f"What is fact {params.seed} about {subject} today?"})


def test_the_benchmark_parts_run_and_render(tmp_path: Path):
    kb, topics = paragraph_kb(tmp_path)
    found = structure_part(kb, topics)
    assert found["label"] == "id-prefix:id" and found["exact"]
    assert (found["n_found"], found["n_true"]) == (2, 2)

    real = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]
    held_out, near = MORE_IN_KNOWLEDGE[10:], OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE
    check = check_part(kb, real, held_out, near, n_calibration=19, sizes=(3,), draws=20, k=3)
    assert [row["near_share"] for row in check["rows"]] == [0.0, 0.1, 0.2, 0.3]
    # out-of-knowledge questions in the calibration raise its critical value: fewer flagged
    assert check["rows"][-1]["fpr"] <= check["rows"][0]["fpr"]
    assert check["rows"][-1]["power"] <= check["rows"][0]["power"]
    for row in check["rows"]:  # the check warns when either of its tests does
        assert max(row["warn_3_ks"], row["warn_3_exceedance"]) <= row["warn_3"]
        assert row["warn_3"] <= row["warn_3_ks"] + row["warn_3_exceedance"]

    llm = ScriptedLLM(responder=topic_question)
    part = llm_part(kb, llm, real, held_out, near, n=10, k=3)
    labels = list(part["rows"])
    assert labels[0] == "real calibration half" and len(labels) == 4
    assert part["rows"][labels[1]]["report"]["context"] == "document"  # (a): records alone
    assert part["rows"][labels[2]]["report"]["context"] == "id-prefix:id"
    # the real half holds the examples, so it is checked against held-out questions
    assert part["rows"][labels[0]]["check"]["n_real"] == len(held_out)
    assert part["rows"][labels[1]]["check"] is None  # fewer than 20 synthetic questions
    users_calls = [
        call[0][0].content
        for call in llm.calls
        if "Questions real users asked" in call[0][0].content
    ]
    assert len(users_calls) >= 10
    assert [sum(q in system for q in real[:20]) for system in users_calls] == [8] * len(users_calls)
    text = markdown({"structure": found, "check": check, "llm": part})
    assert "id-prefix:id" in text and "n < 20" in text
    assert f"{check['rows'][0]['warn_3']:.3f} (" in text  # the check, then each test alone
