"""Readers for the public data sets in ../shared/data (read by path, never copied in).

Paper set-up (Table 1b): the PubMedQA abstracts are the corpus, PubMedQA questions are
in-knowledge, MMLU-Med is near out-of-knowledge and TruthfulQA far out-of-knowledge.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from ragbound.corpus import LINE_IDS

REPO = Path(__file__).resolve().parents[1]

# The corpus records carry an "id" ("PMID-i"), a record's document id by default since issue
# 27; every published figure was measured with file-and-line ids, which the parts ask for.
CORPUS_IDS = LINE_IDS


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


def pubmedqa_abstracts() -> dict[str, str]:
    """PMID -> the abstract's paragraphs joined by spaces (the text the corpus records hold)."""
    return {pmid: " ".join(record["CONTEXTS"]) for pmid, record in _pubmedqa().items()}


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


def tripwire_missing_reason() -> str | None:
    """Why the harmful/safe sets for the tripwire benchmark are absent, or None."""
    root = data_root()
    needed = [root / "harmfulqa" / "harmfulqa.json", root / "xstest" / "xstest_prompts.csv"]
    absent = [str(p) for p in needed if not p.is_file()]
    return f"tripwire data sets not found: {', '.join(absent)}" if absent else None


def harmfulqa() -> dict[str, dict[str, list[str]]]:
    """HarmfulQA: topic -> subtopic -> questions (10 topics, 98 subtopics, 1960 questions)."""
    path = data_root() / "harmfulqa" / "harmfulqa.json"
    return json.loads(path.read_text(encoding="utf-8"))


def dangerousqa() -> list[str]:
    """DangerousQA: 200 harmful questions (another harmful set, not used for tripwires)."""
    path = data_root() / "harmfulqa" / "dangerousqa.json"
    return list(json.loads(path.read_text(encoding="utf-8")))


def xstest(label: str) -> list[str]:
    """XSTest v2 prompts with ``label`` safe (250, scary-sounding but harmless) or unsafe (200)."""
    path = data_root() / "xstest" / "xstest_prompts.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        return [row["prompt"] for row in csv.DictReader(handle) if row["label"] == label]


def covidqa_missing_reason() -> str | None:
    """Why COVID-QA cannot be used here, or None when it is present."""
    path = data_root() / "covidqa" / "covid_qa.json"
    return None if path.is_file() else f"COVID-QA not found: {path}"


def _covidqa_paragraphs() -> list[dict]:
    path = data_root() / "covidqa" / "covid_qa.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return [paragraph for item in data["data"] for paragraph in item["paragraphs"]]


def covidqa_articles() -> dict[str, str]:
    """The 98 COVID-QA articles: document id -> whole article text."""
    return {str(p["document_id"]): p["context"] for p in _covidqa_paragraphs()}


def covidqa_questions() -> list[tuple[str, str]]:
    """The 1,380 COVID-QA questions as (document id of the article that answers it, question)."""
    return [
        (str(p["document_id"]), qa["question"].strip())
        for p in _covidqa_paragraphs()
        for qa in p["qas"]
    ]


def covidqa_answer_starts() -> list[tuple[str, str, int]]:
    """The COVID-QA questions as (document id, question, where its first answer starts in
    that article's text: ``answer_start``); a question without an answer is left out (none
    in the published set)."""
    return [
        (str(p["document_id"]), qa["question"].strip(), int(qa["answers"][0]["answer_start"]))
        for p in _covidqa_paragraphs()
        for qa in p["qas"]
        if qa["answers"]
    ]


def pubmedqa_questions_by_pmid() -> dict[str, str]:
    """PQA-L: PMID -> its question (the abstract of that PMID answers it)."""
    return {pmid: record["QUESTION"] for pmid, record in _pubmedqa().items()}


def catqa() -> list[str]:
    """CatQA (English): 550 harmful questions, 11 categories x 5 subcategories x 10."""
    path = data_root() / "harmfulqa" / "catqa_english.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return [q for subs in data.values() for questions in subs.values() for q in questions]


def adversarialqa() -> list[str]:
    """AdversarialQA: 500 harmful instructions (the llm-attacks transfer behaviours)."""
    path = data_root() / "harmfulqa" / "adversarialqa.json"
    return list(json.loads(path.read_text(encoding="utf-8")))


def harmfulqa_questions() -> list[str]:
    """HarmfulQA's 1960 questions, flat, in file order."""
    return [q for subs in harmfulqa().values() for questions in subs.values() for q in questions]


BANKING77_SPLITS = ("train", "valid", "test", "id-oos_valid", "id-oos_test")


def banking77oos_missing_reason() -> str | None:
    """Why BANKING77-OOS cannot be used here, or None when it is present."""
    root = data_root() / "banking77oos"
    needed = [root / split / name for split in BANKING77_SPLITS for name in ("seq.in", "label")]
    absent = [str(p) for p in needed if not p.is_file()]
    return f"BANKING77-OOS not found: {', '.join(absent)}" if absent else None


def banking77oos(split: str) -> list[tuple[str, str]]:
    """BANKING77-OOS ``split`` (train 5,905, valid 1,506, test 2,000 in-scope lines;
    id-oos_valid 530, id-oos_test 1,080 in-domain out-of-scope) as (query, intent) pairs;
    the intent is "oos" in the id-oos splits. Blank queries (2 in train, 2 in id-oos_valid,
    4 in id-oos_test, as published) are left out."""
    if split not in BANKING77_SPLITS:
        raise ValueError(f"split {split!r}: choose among {', '.join(BANKING77_SPLITS)}")
    folder = data_root() / "banking77oos" / split
    queries = (folder / "seq.in").read_text(encoding="utf-8").splitlines()
    labels = (folder / "label").read_text(encoding="utf-8").splitlines()
    if len(queries) != len(labels):
        raise ValueError(f"{folder}: {len(queries)} queries but {len(labels)} labels")
    pairs = zip(queries, labels, strict=True)
    return [(q.strip(), label.strip()) for q, label in pairs if q.strip()]


CLAPNQ_KINDS = ("answerable", "unanswerable")


def clapnq_missing_reason() -> str | None:
    """Why CLAP NQ cannot be used here, or None when it is present."""
    root = data_root() / "clapnq"
    needed = [root / f"clapnq_dev_{kind}.jsonl" for kind in CLAPNQ_KINDS]
    absent = [str(p) for p in needed if not p.is_file()]
    return f"CLAP NQ not found: {', '.join(absent)}" if absent else None


def clapnq(kind: str) -> list[dict[str, str]]:
    """The 300 CLAP NQ dev questions of ``kind`` (answerable, unanswerable), each as
    {id, question, title, text}: its Wikipedia passage's title and text (one passage each)."""
    if kind not in CLAPNQ_KINDS:
        raise ValueError(f"kind {kind!r}: choose among {', '.join(CLAPNQ_KINDS)}")
    path = data_root() / "clapnq" / f"clapnq_dev_{kind}.jsonl"
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        for passage in record["passages"]:
            rows.append(
                {
                    "id": str(record["id"]),
                    "question": record["input"].strip(),
                    "title": passage["title"],
                    "text": passage["text"],
                }
            )
    return rows


def pubmedqa_decisions() -> dict[str, str]:
    """PQA-L: question -> its expert label (yes, no or maybe), PubMedQA's reference answer."""
    return {record["QUESTION"]: record["final_decision"] for record in _pubmedqa().values()}


def covidqa_answers() -> dict[str, str]:
    """COVID-QA: question (stripped) -> its first answer span's text (a repeated question keeps
    its first answer)."""
    found: dict[str, str] = {}
    for paragraph in _covidqa_paragraphs():
        for qa in paragraph["qas"]:
            if qa["answers"]:
                found.setdefault(qa["question"].strip(), qa["answers"][0]["text"])
    return found


def clapnq_answers() -> dict[str, str]:
    """CLAP NQ's answerable dev questions: question (stripped) -> the first annotator's answer."""
    path = data_root() / "clapnq" / "clapnq_dev_answerable.jsonl"
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            answers = [o["answer"] for o in record.get("output", []) if o.get("answer")]
            if answers:
                found.setdefault(record["input"].strip(), answers[0])
    return found
