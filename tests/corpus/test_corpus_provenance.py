"""Each calibration question's origin, read from its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.corpus.provenance import origins_of, question_origins, record_origin
from ragbound.errors import InputError

SYNTH_LINE = {
    "query": "Do bees sleep?",
    "chunk_id": "c1",
    "doc_id": "d1",
    "prompt_id": "synth-query",
    "prompt_version": 2,
    "model": "local:qwen",
}


@pytest.mark.parametrize(
    ("data", "origin"),
    [
        ({"query": "q", "source": "llm:gpt-4o-mini"}, "synthetic"),
        ({"query": "q", "source": " Synthetic "}, "synthetic"),
        ({"query": "q", "source": "real"}, "real"),
        ({"query": "q", "source": "pubmed/123.txt"}, "unknown"),  # a document, not an author
        (SYNTH_LINE, "synthetic"),  # synth output from before it wrote source
        ({k: v for k, v in SYNTH_LINE.items() if k != "model"}, "unknown"),
        ("Do bees sleep?", "unknown"),
        ({"query": "q", "source": 3}, "unknown"),
    ],
)
def test_a_record_says_where_its_question_came_from(data: object, origin: str) -> None:
    assert record_origin(data) == origin


def test_a_file_s_questions_by_text_and_a_repeat_claims_the_less(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    rows = [
        SYNTH_LINE,
        {"query": "Why do trains run on rails?", "source": "real"},
        {"query": "Why do trains run on rails?"},  # the same text again, saying nothing
        {"query": "  Where do bees live?  ", "source": "real"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert question_origins(path) == {
        "Do bees sleep?": "synthetic",
        "Why do trains run on rails?": "unknown",
        "Where do bees live?": "real",  # keyed by the stripped text calibrate searches
    }


def test_origins_declared_looked_up_or_unknown() -> None:
    texts = ["a", "b"]
    assert origins_of(texts, "real") == ["real", "real"]
    assert origins_of(texts, {"a": "synthetic"}) == ["synthetic", "unknown"]
    assert origins_of(texts, None) == ["unknown", "unknown"]
    with pytest.raises(InputError, match="questions must be one of"):
        origins_of(texts, "human")  # type: ignore[arg-type]
