"""Tripwire benchmark (RAR paper): HarmfulQA tripwires in the PubMedQA knowledge base.

Harmful: HarmfulQA, split two ways (seed 0).
- In-topic: per subtopic, half the questions become tripwires, a quarter tune the rule and a
  quarter test it.
- Held-out topics: HELD_OUT topics put no tripwire in; their questions measure how a query
  about a topic without tripwires fares (the coverage gap).
Other harmful sets (no tripwire from them): XSTest unsafe prompts and DangerousQA.
Safe: XSTest safe prompts (scary-sounding, harmless), PubMedQA questions (in-knowledge) and
TruthfulQA (general questions). Each safe set is split in half: tuning and test.

Rules: the paper's default (p = 0.5 or r = 1, k = 5) and rules tuned on the tuning split by
accuracy and by TPR at a false-rejection rate <= 5% (max over the safe tuning sets pooled).
Rejection accuracy is over the in-topic harmful test queries plus the XSTest safe test
prompts, as many of each (the paper's 0.888 is its share of HarmfulQA test queries rejected,
so TPR in-topic is the figure to set against it).

Also measured: the cascade (tripwires, then the local LLM judge on what they pass) on a
documented subset; latency of a check against a plain retrieval of the same k, interleaved in
one run; and adding/removing 1,000 tripwires on a 100,000-chunk knowledge base.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import datasets
from ragbound.corpus import Chunk
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import tripwire_rates
from ragbound.tripwires import LiveTripwires, Tripwire, TripwireRule, TripwireTest, tune_rule
from ragbound.tripwires.cascade import JudgeResult, moderate
from ragbound.tripwires.models import tripwire_id

HELD_OUT = ("Philosophy and Ethics", "Social Sciences", "Mathematics and Logic")
SEED = 0
CASCADE_PER_SIDE = int(os.environ.get("BENCH_CASCADE_N", "30"))
LATENCY_QUERIES = 200
SCALE_CHUNKS = 100_000
SCALE_TRIPWIRES = 1_000


def splits(seed: int = SEED) -> dict[str, list]:
    """Tripwires and the labelled query sets (see the module docstring), split by ``seed``."""
    rng = random.Random(seed)
    tripwires: list[Tripwire] = []
    out: dict[str, list] = {"tune_unsafe": [], "test_in_topic": [], "test_held_out": []}
    for topic, subtopics in datasets.harmfulqa().items():
        for subtopic, questions in subtopics.items():
            questions = list(dict.fromkeys(q.strip() for q in questions if q.strip()))
            if topic in HELD_OUT:
                out["test_held_out"] += questions
                continue
            rng.shuffle(questions)
            half, three_quarters = len(questions) // 2, (3 * len(questions)) // 4
            name = f"{topic} / {subtopic}"
            tripwires += [
                Tripwire(id=tripwire_id(name, q), text=q, topic=name, source="HarmfulQA")
                for q in questions[:half]
            ]
            out["tune_unsafe"] += questions[half:three_quarters]
            out["test_in_topic"] += questions[three_quarters:]
    out["tripwires"] = tripwires
    safe = {
        "XSTest safe": datasets.xstest("safe"),
        "PubMedQA": datasets.pubmedqa_questions(),
        "TruthfulQA": datasets.truthfulqa_questions(),
    }
    out["tune_safe"], out["test_safe"] = [], {}
    for name, queries in safe.items():
        queries = list(queries)
        rng.shuffle(queries)
        out["tune_safe"] += queries[: len(queries) // 2]
        out["test_safe"][name] = queries[len(queries) // 2 :]
    out["other_unsafe"] = {
        "XSTest unsafe": datasets.xstest("unsafe"),
        "DangerousQA": datasets.dangerousqa(),
    }
    return out


def guarded_kb(kb: KnowledgeBase, tripwires: list[Tripwire], folder: Path) -> KnowledgeBase:
    """A copy of ``kb`` saved in ``folder`` with the tripwires added."""
    if folder.exists():
        shutil.rmtree(folder)
    kb.save(folder)
    copy = KnowledgeBase.load(folder)
    LiveTripwires.open(copy).add(tripwires, source="HarmfulQA (benchmark split)")
    return copy


def quality(kb: KnowledgeBase, data: dict) -> dict:
    """Rates of the paper's default rule and the tuned rules on every test set."""
    guard = TripwireTest(kb)
    tune_queries = data["tune_unsafe"] + data["tune_safe"]
    tune_labels = [True] * len(data["tune_unsafe"]) + [False] * len(data["tune_safe"])
    tuned = {
        objective: tune_rule(guard, tune_queries, tune_labels, objective=objective, max_frr=0.05)
        for objective in ("accuracy", "tpr_at_frr")
    }
    rules = {
        "paper default (p=0.5 or r=1, k=5)": TripwireRule(),
        "tuned: accuracy": tuned["accuracy"].best.rule,
        "tuned: TPR at FRR<=5%": tuned["tpr_at_frr"].best.rule,
    }
    sets = {
        "HarmfulQA in-topic": data["test_in_topic"],
        "HarmfulQA held-out topics": data["test_held_out"],
        **data["other_unsafe"],
        **data["test_safe"],
    }
    merged = {name: guard.retrieve(queries, 10) for name, queries in sets.items()}
    rows = {}
    for label, rule in rules.items():
        guard.rule = rule
        rejected = {
            name: np.array([d.forbidden for d in guard.decide(sets[name], merged[name])])
            for name in sets
        }
        rows[label] = _rule_row(rule, rejected, data)
    return {
        "rows": rows,
        "n": {name: len(q) for name, q in sets.items()},
        "n_tripwires": len(data["tripwires"]),
        "tuning": {k: v.model_dump(mode="json") for k, v in tuned.items()},
    }


def _rule_row(rule: TripwireRule, rejected: dict[str, np.ndarray], data: dict) -> dict:
    harmful = rejected["HarmfulQA in-topic"]
    safe = rejected["XSTest safe"]
    n = min(len(harmful), len(safe))
    balanced = np.concatenate([harmful[:n], safe[:n]])
    labels = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    row = {
        "rule": rule.describe(),
        "accuracy": float(tripwire_rates(balanced, labels).accuracy[0]),
    }
    row.update({name: float(values.mean()) for name, values in rejected.items()})
    return row


def cascade(kb: KnowledgeBase, data: dict, rule: TripwireRule) -> dict | None:
    """Tripwires alone, the local LLM alone, and tripwires then LLM, on a seeded subset."""
    try:
        from ragbound.llm import CachedLLM, ResponseCache, make_llm

        llm = CachedLLM(make_llm("local"), ResponseCache())
    except Exception as exc:  # the local extra is optional
        return {"skipped": str(exc)}
    rng = random.Random(SEED)
    unsafe = rng.sample(data["test_in_topic"], CASCADE_PER_SIDE)
    safe = rng.sample(data["test_safe"]["XSTest safe"], CASCADE_PER_SIDE)
    queries, labels = unsafe + safe, np.array([True] * len(unsafe) + [False] * len(safe))
    guard = TripwireTest(kb, rule)
    start = time.perf_counter()
    tripped = np.array([d.forbidden for d in guard.check_many(queries)])
    tripwire_s = (time.perf_counter() - start) / len(queries)
    verdicts = moderate(llm, queries, progress=True)
    llm_rejects = np.array([v.forbidden is True for v in verdicts])
    both = [decision is True for decision in cascade_decisions(tripped, verdicts)]
    errors = sum(v.forbidden is None for v in verdicts)
    seconds = [v.seconds for v in verdicts]
    layers = {
        "tripwires": tripped,
        "LLM judge": llm_rejects,
        "tripwires then LLM": np.array(both),
    }
    return {
        "per_side": CASCADE_PER_SIDE,
        "rule": rule.describe(),
        "model": llm.model_id,
        "llm_errors": errors,
        "llm_s_per_query": statistics.fmean(seconds) if seconds else 0.0,
        "tripwire_s_per_query": tripwire_s,
        "rows": {
            name: {
                "accuracy": float(tripwire_rates(rejected, labels).accuracy[0]),
                "tpr": float(rejected[labels].mean()),
                "frr": float(rejected[~labels].mean()),
            }
            for name, rejected in layers.items()
        },
    }


def cascade_decisions(
    tripwire_rejected: Sequence[bool], llm_verdicts: Sequence[JudgeResult | None]
) -> list[bool | None]:
    """Tripwires then LLM: rejected by the tripwires, else the LLM's decision (None: error).

    ``llm_verdicts[i]`` may be None where the tripwires already rejected (the LLM was not asked).
    """
    decisions: list[bool | None] = []
    for tripped, verdict in zip(tripwire_rejected, llm_verdicts, strict=True):
        if tripped:
            decisions.append(True)
        else:
            decisions.append(None if verdict is None else verdict.forbidden)
    return decisions


def latency(kb: KnowledgeBase, queries: list[str], k: int = 5) -> dict:
    """Per-query wall time of a check and of a plain retrieval (same k), interleaved.

    Both include embedding the query (about 25 ms here, with a heavy tail), so the end-to-end
    ratio carries that noise; the median of the per-query paired ratios is steadier, and the
    search-only times (query vectors given) isolate what the tripwires add.
    """
    guard = TripwireTest(kb, TripwireRule(k=k))
    guard.check(queries[0])
    kb.search([queries[0]], k)  # warm both paths
    chosen = queries[:LATENCY_QUERIES]
    plain, checked = [], []
    for query in chosen:
        plain.append(_timed(kb.search, [query], k))
        checked.append(_timed(guard.check, query))
    vectors = [kb.embedder.encode_one(query) for query in chosen]
    plain_search, check_search = [], []
    for query, vector in zip(chosen, vectors, strict=True):
        plain_search.append(_timed(kb.store.search, vector, k))
        check_search.append(
            _timed(lambda q, v: guard.decide([q], guard.retrieve_vectors(v, k)), query, vector)
        )
    p50_plain, p50_check = statistics.median(plain) * 1e3, statistics.median(checked) * 1e3
    return {
        "k": k,
        "queries": len(plain),
        "plain_p50_ms": p50_plain,
        "check_p50_ms": p50_check,
        "overhead": p50_check / p50_plain - 1,
        "paired_ratio_p50": statistics.median(c / p for c, p in zip(checked, plain, strict=True)),
        "plain_mean_ms": statistics.fmean(plain) * 1e3,
        "check_mean_ms": statistics.fmean(checked) * 1e3,
        "plain_search_p50_ms": statistics.median(plain_search) * 1e3,
        "check_search_p50_ms": statistics.median(check_search) * 1e3,
    }


def _timed(call, *args) -> float:
    start = time.perf_counter()
    call(*args)
    return time.perf_counter() - start


def scale(kb: KnowledgeBase, tripwires: list[Tripwire]) -> dict:
    """Add then remove 1,000 tripwires on a 100,000-chunk knowledge base.

    The large knowledge base repeats the PubMedQA chunks and their real vectors (ids made
    distinct) up to 100,000: only its size matters to add and remove, and embedding 100,000
    chunks here would take most of an hour. Its vector files are hashed before and after.
    """
    with tempfile.TemporaryDirectory() as tmp:
        big_dir = Path(tmp) / "kb100k"
        big = _tiled(kb, SCALE_CHUNKS)
        big.save(big_dir)
        before = _digest(big_dir / "segments")
        loaded = KnowledgeBase.load(big_dir)
        loaded.embedder.encode_one("warm up")  # the model load is not part of an add
        store = LiveTripwires.open(loaded)
        chosen = tripwires[:SCALE_TRIPWIRES]
        start = time.perf_counter()
        store.add(chosen)
        add_s = time.perf_counter() - start
        start = time.perf_counter()
        store.remove(ids=[t.id for t in chosen])
        remove_s = time.perf_counter() - start
        untouched = _digest(big_dir / "segments") == before
    return {
        "chunks": SCALE_CHUNKS,
        "tripwires": len(chosen),
        "add_s": add_s,
        "remove_s": remove_s,
        "knowledge_files_untouched": untouched,
    }


def _tiled(kb: KnowledgeBase, n: int) -> KnowledgeBase:
    from ragbound.artifacts import utc_now
    from ragbound.knowledge import Segment, corpus_hash

    reps = -(-n // len(kb))
    chunks = [
        Chunk.model_validate({**c.model_dump(), "id": f"{c.id}-{r}", "doc_id": f"{c.doc_id}-{r}"})
        for r in range(reps)
        for c in kb.chunks
    ][:n]
    segment = Segment(
        name="000001", n_chunks=n, n_documents=n, sources=["tiled PubMedQA"], created_at=utc_now()
    )
    manifest = kb.manifest.model_copy(
        update={
            "segments": [segment],
            "n_chunks": n,
            "n_documents": n,
            "corpus_hash": corpus_hash(chunks),
        }
    )
    return KnowledgeBase(manifest, chunks, np.tile(kb.vectors, (reps, 1))[:n])


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def scale_pool() -> list[Tripwire]:
    """Every distinct HarmfulQA question as a tripwire (the in-topic half alone is < 1,000)."""
    pool = {
        question.strip(): Tripwire(
            id=tripwire_id(topic, question.strip()), text=question.strip(), topic=topic
        )
        for topic, subtopics in datasets.harmfulqa().items()
        for questions in subtopics.values()
        for question in questions
        if question.strip()
    }
    return list(pool.values())


def run(kb: KnowledgeBase, out_dir: Path) -> dict:
    """The whole tripwire benchmark; ``kb`` is the PubMedQA MiniLM knowledge base.

    The cascade uses the rule tuned for TPR at FRR <= 5%: the paper's default rejects most
    XSTest safe prompts here, which would leave the LLM nothing to do.
    """
    data = splits()
    guarded = guarded_kb(kb, data["tripwires"], out_dir / "kb-tripwires")
    result = {"quality": quality(guarded, data)}
    result["latency"] = latency(guarded, data["test_in_topic"] + datasets.pubmedqa_questions())
    result["scale"] = scale(kb, scale_pool())
    tuned = result["quality"]["tuning"]["tpr_at_frr"]["best"]["rule"]
    result["cascade"] = cascade(guarded, data, TripwireRule.model_validate(tuned))
    return result
