"""Readers for the public data sets in ../shared/data (read by path, never copied in).

Paper set-up (Table 1b): the PubMedQA abstracts are the corpus, PubMedQA questions are
in-knowledge, MMLU-Med is near out-of-knowledge and TruthfulQA far out-of-knowledge.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def data_root() -> Path:
    """``$RAGBOUND_DATA`` or ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("RAGBOUND_DATA") or REPO.parent / "shared" / "data")


def missing_reason() -> str | None:
    """Why the real data cannot be used here, or None when it is present."""
    root = data_root()
    needed = [
        root / "pubmedqa" / "ori_pqal.json",
        root / "mirage" / "mmlu-med.json",
        root / "truthfulqa" / "data" / "v1" / "TruthfulQA.csv",
    ]
    absent = [str(p) for p in needed if not p.is_file()]
    return f"real data sets not found: {', '.join(absent)}" if absent else None


def _pubmedqa() -> dict:
    return json.loads((data_root() / "pubmedqa" / "ori_pqal.json").read_text(encoding="utf-8"))


def write_pubmedqa_corpus(path: Path) -> Path:
    """Write the PQA-L abstract paragraphs (3358) as JSONL records {id, text, pmid}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for pmid, record in _pubmedqa().items():
            for i, context in enumerate(record["CONTEXTS"]):
                out.write(json.dumps({"id": f"{pmid}-{i}", "text": context, "pmid": pmid}) + "\n")
    return path


def pubmedqa_questions() -> list[str]:
    """The 1000 PQA-L questions (in-knowledge for the PubMedQA corpus)."""
    return [record["QUESTION"] for record in _pubmedqa().values()]


def mmlu_med_questions() -> list[str]:
    """MMLU medical questions from MIRAGE (near out-of-knowledge), 1089."""
    data = json.loads((data_root() / "mirage" / "mmlu-med.json").read_text(encoding="utf-8"))
    return [item["question"] for item in data.values()]


def truthfulqa_questions() -> list[str]:
    """The original 817 TruthfulQA questions (far out-of-knowledge)."""
    path = data_root() / "truthfulqa" / "data" / "v1" / "TruthfulQA.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        return [row["Question"] for row in csv.DictReader(handle)]
