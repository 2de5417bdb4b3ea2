"""The answerability test against relevance alone: questions on the knowledge's
topic whose answer the knowledge does not hold.

Construction (KnowOrNot's leave-one-out), per corpus of the zoo and per seed
(``BENCH_ANSWER_SEEDS``, default 3): a seeded quarter (rounded) of the source documents is
left out of the index, the rest indexed (MiniLM, 200-word chunks as ``ragbound index`` makes
them; each corpus indexed whole once, cached, and restricted to the kept documents per seed).

- **PubMedQA**: a quarter of the PQA-L abstracts (PMIDs) left out; their questions are the
  left-out set.
- **COVID-QA**: every article cut into its paragraphs (its lines), each paragraph a document;
  a quarter of each article's paragraphs left out. A question whose ``answer_start`` lies in a
  left-out paragraph is on its article's topic, its answer gone (the hard case).
- **BANKING77-OOS by intent**: the training queries indexed with their intent as the
  document; a quarter of the 50 intents left out; the validation and test queries of those
  intents are the left-out set.
- **CLAP NQ**: a quarter of the Wikipedia titles left out; their answerable questions are the
  left-out set. The unanswerable questions whose title is indexed (a passage on the topic
  that lacks the answer) are scored apart.

The answerable questions of the kept documents are split in halves (seeded): one calibrates,
the other is the held-out in-knowledge test.

Rows: relevance alone (the default: ``Guard.calibrate(kb, questions)``, MSS), relevance +
coverage (``answerability="coverage"``, decided by ``Gate.decide_many``: abstain when either
test flags, both at the shared level; the gate runs coverage only on the questions relevance
lets through, so coverage's own scores come from ``guard.answers.verdicts``), and, as
diagnostics, coverage alone at alpha and the research's best LLM-free alternative, the
best-sentence cosine (minus the largest cosine between the question and a sentence of its 5
nearest chunks; not shipped), alone and with relevance at their shared level
(:func:`ragbound.stats.answerability.shared_alpha`).
Columns: the left-out questions flagged, CLAP NQ's unanswerable ones flagged, the held-out
in-knowledge questions flagged (false "I don't know"), AUROC in-knowledge test vs left out on
the row's score (two tests: the smaller of their p-values, what the union decides on), and
the share of calibration questions tied at a single test's top score (coverage's null has
an atom at 1, "no word found": above alpha, that test never flags) and the p50 of
``Gate.decide`` one question at a time (a plain embedder; with and without the
answerability test, interleaved in one run, on ``BENCH_ANSWER_LATENCY_N`` questions, default
100). Mean ± sd over seeds; a summary with the mean over corpora and the worst corpus, and the
issue's targets.

``make bench-answerability`` or ``python -m benchmarks.run answerability`` (``answerability
render``: the section again from bench_out/answerability.json, measuring nothing);
``BENCH_ANSWER_CORPORA`` (comma-separated) runs some corpora only. The zoo's knowledge bases
are read from (or built into) bench_out/zoo/, the COVID-QA paragraphs' and the query and
sentence embeddings are cached under bench_out/answerability/.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from benchmarks import datasets, near, zoo
from benchmarks.doc import markdown_table, measured_or_saved, write_section
from benchmarks.settings import int_value
from benchmarks.timing import paired_latency
from ragbound.artifacts import write_json
from ragbound.corpus import Chunk, Document
from ragbound.corpus.chunker import split_sentences
from ragbound.detect import Guard
from ragbound.detect.answerability import DEPTH
from ragbound.detect.evaluate import split_queries
from ragbound.embedders import load_dense_embedder
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import EmpiricalNull, auroc
from ragbound.stats.answerability import calibration_p_values, shared_alpha

OUT = datasets.REPO / "bench_out"
CACHE = OUT / "answerability"
SIZE_COLUMNS = (
    "documents kept",
    "chunks",
    "calibration",
    "in-knowledge test",
    "left out",
    "unanswerable, title indexed",
)
RAW = OUT / "answerability.json"
TITLE = "Answerability: on-topic questions whose answer the knowledge lacks"
SPEC = zoo.SPEC
GRANULARITY = zoo.GRANULARITY
ALPHA = zoo.ALPHA
LEAVE = 0.25  # the share of source documents left out (KnowOrNot's)
COVID = "COVID-QA"
CLAP = "CLAP NQ"
CORPORA = ("PubMedQA", COVID, zoo.BY_INTENT, CLAP)
RELEVANCE = "relevance alone (default, mss)"
WITH_COVERAGE = "relevance + coverage"
COVERAGE = f"coverage alone at {ALPHA} (diagnostic)"
SENTENCE_UNION = "relevance + best-sentence cosine (diagnostic, not shipped)"
SENTENCE = f"best-sentence cosine alone at {ALPHA} (diagnostic, not shipped)"
CHOICES = (RELEVANCE, WITH_COVERAGE, COVERAGE, SENTENCE_UNION, SENTENCE)
# the targets
FPR_BOUND = ALPHA + zoo.FPR_SLACK
GAIN_BOUND = 0.15
UNANSWERABLE_BOUND = 0.35
LATENCY_BOUND = 1.15


@dataclass
class LeaveOutSplit:
    """One seeded leave-one-out split: the knowledge base of the kept documents, its
    calibration and held-out questions, the left-out documents' questions and (CLAP NQ) the
    unanswerable questions on kept titles."""

    kb: KnowledgeBase
    kept: set[str]
    calibration: list[str]
    inside: list[str]
    left_out: list[str]
    unanswerable: list[str] = field(default_factory=list)

    def sets(self) -> dict[str, list[str]]:
        """The question sets scored (the unanswerable one only where there is one)."""
        found = {"inside": self.inside, "left_out": self.left_out}
        return found | ({"unanswerable": self.unanswerable} if self.unanswerable else {})

    def sizes(self) -> dict[str, int]:
        counts = (
            len(self.kept),
            len(self.kb.chunks),
            len(self.calibration),
            len(self.inside),
            len(self.left_out),
            len(self.unanswerable),
        )
        return dict(zip(SIZE_COLUMNS, counts, strict=True))


# ------------------------------------------------------------------------------ splits
def left_out(groups: Mapping[str, Collection[str]], seed: int) -> set[str]:
    """A seeded quarter (rounded) of each group's documents."""
    rng = np.random.default_rng(seed)
    left: set[str] = set()
    for name in sorted(groups):
        items = sorted(groups[name])
        left |= set(rng.permutation(items)[: round(LEAVE * len(items))].tolist())
    return left


def leave_out_split(
    kb: KnowledgeBase,
    seed: int,
    questions: Sequence[tuple[str, str]],
    groups: Mapping[str, Collection[str]],
    source: Callable[[Chunk], str | None] = lambda chunk: chunk.doc_id,
    unanswerable: Sequence[tuple[str, str]] = (),
) -> LeaveOutSplit:
    """``questions`` and ``unanswerable`` are (source document, question); a chunk's source
    document is ``source(chunk)``; a quarter of each group of ``groups`` is left out."""
    left = left_out(groups, seed)
    kept = {chunk.doc_id for chunk in kb.chunks if source(chunk) not in left}
    inside = [q for doc, q in questions if doc not in left]
    calibration, test = split_queries(inside, 0.5, seed=seed)
    outside = [q for doc, q in questions if doc in left]
    unanswered = [q for doc, q in unanswerable if doc not in left]
    return LeaveOutSplit(kb.restricted_to(kept), kept, calibration, test, outside, unanswered)


def pubmedqa_split(kb: KnowledgeBase, seed: int) -> LeaveOutSplit:
    by_pmid = datasets.pubmedqa_questions_by_pmid()
    return leave_out_split(
        kb,
        seed,
        list(by_pmid.items()),
        {"abstracts": list(by_pmid)},
        source=lambda chunk: chunk.metadata.get("pmid"),
    )


def paragraph_bounds(text: str) -> list[tuple[int, int]]:
    """Each paragraph (line) of an article's text: its start and end offsets."""
    return [m.span() for m in re.finditer(r"[^\n]+", text)]


@functools.cache
def covid_paragraphs() -> tuple[tuple[Document, ...], tuple[tuple[str, str], ...]]:
    """The COVID-QA articles' paragraphs as documents (id ``ARTICLE:i``, metadata article),
    and each question with the paragraph its answer starts in (just after a paragraph: that
    one); a question whose answer starts in none is left out."""
    articles = datasets.covidqa_articles()
    bounds = {doc_id: paragraph_bounds(text) for doc_id, text in articles.items()}
    documents = tuple(
        Document(
            id=f"{doc_id}:{i}",
            text=articles[doc_id][start:end],
            source=f"covidqa/{doc_id}",
            metadata={"article": doc_id},
        )
        for doc_id, spans in bounds.items()
        for i, (start, end) in enumerate(spans)
    )
    questions = []
    for doc_id, question, answer in datasets.covidqa_answer_starts():
        found = [i for i, (start, end) in enumerate(bounds[doc_id]) if start <= answer <= end]
        if found:
            questions.append((f"{doc_id}:{found[0]}", question))
    return documents, tuple(questions)


def covid_split(kb: KnowledgeBase, seed: int) -> LeaveOutSplit:
    documents, questions = covid_paragraphs()
    groups: dict[str, list[str]] = {}
    for doc in documents:
        groups.setdefault(str(doc.metadata["article"]), []).append(doc.id)
    return leave_out_split(kb, seed, questions, groups)


def banking_split(kb: KnowledgeBase, seed: int) -> LeaveOutSplit:
    intents = sorted({chunk.doc_id for chunk in kb.chunks})
    pairs = datasets.banking77oos("valid") + datasets.banking77oos("test")
    return leave_out_split(kb, seed, [(y, q) for q, y in pairs], {"intents": intents})


def clapnq_split(kb: KnowledgeBase, seed: int) -> LeaveOutSplit:
    titles = sorted({chunk.doc_id for chunk in kb.chunks})
    answerable = [(r["title"], r["question"]) for r in datasets.clapnq("answerable")]
    unanswerable = [(r["title"], r["question"]) for r in datasets.clapnq("unanswerable")]
    return leave_out_split(kb, seed, answerable, {"titles": titles}, unanswerable=unanswerable)


SPLITS: dict[str, Callable[[KnowledgeBase, int], LeaveOutSplit]] = {
    "PubMedQA": pubmedqa_split,
    COVID: covid_split,
    zoo.BY_INTENT: banking_split,
    CLAP: clapnq_split,
}


def knowledge_base(corpus: str, embedder: near.CachedEmbedder) -> tuple[KnowledgeBase, dict]:
    """The corpus's whole knowledge base (the zoo's, or COVID-QA's paragraphs) and its build
    time as the zoo records it."""
    if corpus != COVID:
        return zoo.knowledge_base(corpus, zoo.CACHE, OUT, embedder)
    folder = CACHE / "kb-covidqa-paragraphs"
    kb, seconds = near.cached_kb(
        folder, lambda: list(covid_paragraphs()[0]), embedder, SPEC, GRANULARITY
    )
    timing = CACHE / "kb-covidqa-paragraphs.build.json"
    if seconds is not None:
        write_json(timing, {"seconds": seconds})
        return kb, {"seconds": seconds, "cached": False}
    found = json.loads(timing.read_text()) if timing.is_file() else {}
    return kb, {"seconds": found.get("seconds"), "cached": True}


def missing_reason(corpus: str) -> str | None:
    """Why ``corpus`` cannot run here (a data set absent), or None."""
    return zoo.missing_reason("COVID-QA halves" if corpus == COVID else corpus)


# ------------------------------------------------------------------------------ scoring
@dataclass(frozen=True)
class SetScores:
    """One question set under both guards: each test's score and p-value, and whether the
    gate abstained with relevance alone and with both tests."""

    relevance: np.ndarray
    relevance_p: np.ndarray
    coverage: np.ndarray
    coverage_p: np.ndarray
    abstained_alone: np.ndarray
    abstained_both: np.ndarray
    sentence: np.ndarray | None = None
    sentence_p: np.ndarray | None = None


def decided(alone: Gate, both: Gate, queries: Sequence[str]) -> SetScores:
    """Both gates' decisions on ``queries`` (``Gate.decide_many``, as a user's batch). The
    gate runs the answerability test only on questions the relevance test lets through: its
    score and p-value on every question come from ``guard.answers.verdicts`` on the
    same search."""
    plain = alone.decide_many(queries)
    found = both.decide_many(queries)
    guard = both.guard
    model = guard.answerability
    if model is None:
        raise ValueError("the relevance + coverage gate has no answerability test")
    hits = guard.kb.search(list(queries), max(guard.k, model.depth))
    answers = guard.answers.verdicts(queries, hits, guard.answerability_level())
    return SetScores(
        relevance=np.array([d.test.score for d in found]),
        relevance_p=np.array([d.test.p_value for d in found]),
        coverage=np.array([a.score for a in answers]),
        coverage_p=np.array([a.p_value for a in answers]),
        abstained_alone=np.array([d.action == "abstain" for d in plain]),
        abstained_both=np.array([d.action == "abstain" for d in found]),
    )


Encode = Callable[[list[str]], np.ndarray]


def best_sentence_cosine(kb: KnowledgeBase, encode: Encode, queries: Sequence[str]) -> np.ndarray:
    """Minus the largest cosine between each query and a sentence of its :data:`DEPTH`
    nearest chunks (higher = less answerable); ``encode`` gives unit vectors."""
    hits = kb.search(list(queries), min(DEPTH, len(kb)))
    rows = sorted({int(r) for r in hits.indices.ravel() if r >= 0})
    texts = {r: split_sentences(kb.chunk_at(r).text) or [kb.chunk_at(r).text] for r in rows}
    starts = np.cumsum([0] + [len(texts[r]) for r in rows])
    where = {r: range(starts[i], starts[i + 1]) for i, r in enumerate(rows)}
    sentences = encode([s for r in rows for s in texts[r]])
    asked = encode(list(queries))
    scores = np.zeros(len(queries))
    for i, row in enumerate(hits.indices):
        own = [j for r in row if r >= 0 for j in where[int(r)]]
        scores[i] = -float((sentences[own] @ asked[i]).max()) if own else 0.0
    return scores


def with_sentences(
    kb: KnowledgeBase,
    encode: Encode,
    alone: Guard,
    sets: dict[str, list[str]],
    scored: dict[str, SetScores],
) -> tuple[float, np.ndarray]:
    """Add the best-sentence cosine and its conformal p-values (null: the relevance test's
    calibration questions) to ``scored``; returns the level it shares with relevance, and
    that null."""
    null = best_sentence_cosine(kb, encode, alone.calibration.queries)
    pairs = [calibration_p_values(alone.null_scores()), calibration_p_values(null)]
    empirical = EmpiricalNull(null)
    for name, queries in sets.items():
        score = best_sentence_cosine(kb, encode, queries)
        scored[name] = replace(scored[name], sentence=score, sentence_p=empirical.p_values(score))
    return shared_alpha(np.column_stack(pairs), ALPHA), null


def top_share(null: Sequence[float]) -> float:
    """The share of calibration scores tied at the largest: when it exceeds alpha, no
    question's conformal p-value can reach alpha (the test never flags)."""
    values = np.asarray(null, dtype=float)
    return float(np.mean(values >= values.max()))


def flags_and_scores(choice: str, s: SetScores, level: float) -> tuple[np.ndarray, np.ndarray]:
    """What ``choice`` flags in a set and the score its AUROC reads (two tests: minus the
    smaller p-value, what their union decides on); ``level``: the sentence union's."""
    if choice == RELEVANCE:
        return s.abstained_alone, s.relevance
    if choice == WITH_COVERAGE:
        return s.abstained_both, -np.minimum(s.relevance_p, s.coverage_p)
    if choice == COVERAGE:
        return s.coverage_p <= ALPHA, s.coverage
    if s.sentence is None or s.sentence_p is None:
        raise ValueError(f"{choice}: the best-sentence cosine was not computed")
    if choice == SENTENCE_UNION:
        p = np.minimum(s.relevance_p, s.sentence_p)
        return p <= level, -p
    return s.sentence_p <= ALPHA, s.sentence


def measures(choice: str, scored: dict[str, SetScores], level: float) -> dict[str, float]:
    """Left-out and unanswerable flagged, held-out FPR, AUROC in-knowledge vs left out."""
    found = {name: flags_and_scores(choice, s, level) for name, s in scored.items()}
    row = {
        "left_out": float(np.mean(found["left_out"][0])),
        "fpr": float(np.mean(found["inside"][0])),
        "auroc": auroc(found["inside"][1], found["left_out"][1]),
    }
    if "unanswerable" in found:
        row["unanswerable"] = float(np.mean(found["unanswerable"][0]))
    return row


def decide_latency(
    split: LeaveOutSplit, alone: Guard, both: Guard, whole: KnowledgeBase, n: int, seed: int
) -> dict:
    """p50 of ``Gate.decide(q)`` without and with the answerability test, one question at a
    time, interleaved (:func:`benchmarks.timing.paired_latency`), on ``n`` seeded held-out
    and left-out questions; ``whole``: the corpus's knowledge base with a plain embedder."""
    kb = whole.restricted_to(split.kept)
    bare = Gate(Guard(kb, alone.calibration))
    guarded = Gate(Guard(kb, both.calibration))
    pool = split.inside + split.left_out
    order = np.random.default_rng(seed).permutation(len(pool))[:n]
    return paired_latency(bare.decide, guarded.decide, [pool[i] for i in order])


def split_rows(
    split: LeaveOutSplit,
    encode: Encode | None = None,
    whole: KnowledgeBase | None = None,
    latency_n: int = 0,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Choice -> its measures on one split (the sentence rows with ``encode``; the latency
    with ``whole``, the corpus's knowledge base with a plain embedder, and ``latency_n``)."""
    alone = Guard.calibrate(split.kb, split.calibration)
    both = Guard.calibrate(split.kb, split.calibration, answerability="coverage")
    sets = split.sets()
    scored = {name: decided(Gate(alone), Gate(both), qs) for name, qs in sets.items()}
    choices = [RELEVANCE, WITH_COVERAGE, COVERAGE]
    levels = {WITH_COVERAGE: both.answerability_level()}
    assert both.answerability is not None
    nulls = {COVERAGE: both.answerability.null}
    if encode is not None:
        found = with_sentences(split.kb, encode, alone, sets, scored)
        levels[SENTENCE_UNION], nulls[SENTENCE] = found
        choices += [SENTENCE_UNION, SENTENCE]
    level = levels.get(SENTENCE_UNION, ALPHA)
    rows = {choice: measures(choice, scored, level) for choice in choices}
    for choice, null in nulls.items():
        rows[choice]["null_top"] = top_share(null)
    for choice in choices:
        rows[choice]["level"] = levels.get(choice, ALPHA)
    if whole is not None and latency_n:
        lat = decide_latency(split, alone, both, whole, latency_n, seed)
        rows[RELEVANCE]["p50_ms"] = lat["bare_p50_ms"]
        rows[WITH_COVERAGE] |= {"p50_ms": lat["guarded_p50_ms"], "p50_ratio": lat["ratio_p50"]}
    return rows


# --------------------------------------------------------------------------------- part
def _corpora() -> list[str]:
    raw = os.environ.get("BENCH_ANSWER_CORPORA", ",".join(CORPORA))
    chosen = [c.strip() for c in raw.split(",") if c.strip()]
    if not chosen or any(c not in CORPORA for c in chosen):
        raise SystemExit(f"BENCH_ANSWER_CORPORA={raw!r}: choose among {', '.join(CORPORA)}")
    return chosen


def slug(corpus: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", corpus.lower()).strip("-")


def corpus_rows(
    corpus: str,
    embedder: near.CachedEmbedder,
    seeds: Sequence[int],
    latency_n: int,
    results: dict,
) -> None:
    """Every seed of one corpus into ``results`` (rows, sizes, build and run seconds); the
    query embeddings cached by ``embedder``, the sentences' in a cache of the corpus's own."""
    start = time.perf_counter()
    sentences = near.CachedEmbedder(load_dense_embedder(SPEC), CACHE / "sentences" / slug(corpus))
    kb, results["build_s"][corpus] = knowledge_base(corpus, embedder)
    whole = KnowledgeBase.load(kb.path, embedder=load_dense_embedder(SPEC)) if latency_n else None
    for seed in seeds:
        split = SPLITS[corpus](kb, seed)
        new = split_rows(split, sentences.encode, whole, latency_n, seed)
        zoo.collect(results["rows"], corpus, new)
        results["sizes"][corpus] = split.sizes()
        print(f"{corpus} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    results["seconds"][corpus] = time.perf_counter() - start


def answerability_part(save: Callable[[dict], None] | None = None) -> dict:
    """Every seeded split of every corpus; ``save`` gets the results after each corpus."""
    seeds = list(range(int_value("BENCH_ANSWER_SEEDS", "3", 1, "3")))
    latency_n = int_value("BENCH_ANSWER_LATENCY_N", "100", 0, "100")
    results: dict = {
        "embedder": SPEC,
        "granularity": GRANULARITY,
        "alpha": ALPHA,
        "leave": LEAVE,
        "seeds": seeds,
        "latency_n": latency_n,
        "choices": list(CHOICES),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "rows": {},
        "sizes": {},
        "skipped": {},
        "build_s": {},
        "seconds": {},
    }
    embedder = near.CachedEmbedder(load_dense_embedder(SPEC), CACHE / "query-cache")
    began = time.perf_counter()
    for corpus in _corpora():
        reason = missing_reason(corpus)
        if reason:
            results["skipped"][corpus] = reason
            print(f"skipping {corpus}: {reason}")
            continue
        corpus_rows(corpus, embedder, seeds, latency_n, results)
        results["total_s"] = time.perf_counter() - began
        if save is not None:
            save(results)
    return results


# ----------------------------------------------------------------------------- summary
def mean_of(results: dict, corpus: str, choice: str, metric: str) -> float | None:
    """The mean over seeds of one measure (None: not measured)."""
    values = results["rows"].get(corpus, {}).get(choice, {}).get(metric)
    return float(np.mean(values)) if values else None


def gains(results: dict, corpus: str, choice: str) -> list[float] | None:
    """Per seed: the left-out questions ``choice`` flags minus those relevance alone flags."""
    found = results["rows"].get(corpus, {})
    mine, base = found.get(choice, {}).get("left_out"), found.get(RELEVANCE, {}).get("left_out")
    if choice == RELEVANCE or not mine or not base or len(mine) != len(base):
        return None
    return list(np.subtract(mine, base))


def per_corpus(results: dict, choice: str, metric: str) -> dict[str, float]:
    """Corpus -> the mean over seeds of ``metric`` ("gain": over relevance alone)."""
    out = {}
    for corpus in results["rows"]:
        if metric == "gain":
            found = gains(results, corpus, choice)
            value = float(np.mean(found)) if found else None
        else:
            value = mean_of(results, corpus, choice, metric)
        if value is not None:
            out[corpus] = value
    return out


# metric -> (label, the worst is the lowest)
SUMMARY = {
    "left_out": ("left-out flagged", True),
    "gain": ("gain over relevance alone (left-out flagged)", True),
    "fpr": ("held-out FPR", False),
    "auroc": ("AUROC (in vs left out)", True),
    "p50_ratio": ("p50 x relevance alone", False),
}


def worst(values: dict[str, float], lowest: bool) -> tuple[str, float] | None:
    if not values:
        return None
    corpus = (min if lowest else max)(values, key=values.get)
    return corpus, values[corpus]


def targets(results: dict, choice: str) -> list[tuple[str, bool | None, str]]:
    """The issue's targets for ``choice``: (target, met (None: not measured), worst value)."""
    found = [
        ("held-out FPR", "fpr", False, lambda v: v <= FPR_BOUND),
        ("gain", "gain", True, lambda v: v >= GAIN_BOUND),
        ("CLAP NQ unanswerable", "unanswerable", True, lambda v: v >= UNANSWERABLE_BOUND),
        ("p50", "p50_ratio", False, lambda v: v <= LATENCY_BOUND),
    ]
    out: list[tuple[str, bool | None, str]] = []
    for label, metric, lowest, met in found:
        at = worst(per_corpus(results, choice, metric), lowest)
        if at is None:
            out.append((label, None, "n/a"))
        else:
            out.append((label, bool(met(at[1])), f"{at[1]:.3f} ({at[0]})"))
    return out


def summary_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per choice: mean over corpora and the worst corpus of each measure, CLAP NQ's
    unanswerable flagged, and which targets it meets."""
    header = ["choice"]
    for label, _ in SUMMARY.values():
        header += [f"mean {label}", "worst corpus"]
    header += [f"{CLAP} unanswerable flagged", "targets missed"]
    table = []
    for choice in results["choices"]:
        row = [choice]
        for metric, (_, lowest) in SUMMARY.items():
            values = per_corpus(results, choice, metric)
            at = worst(values, lowest)
            row += (
                [f"{np.mean(list(values.values())):.3f}", f"{at[1]:.3f} ({at[0]})"]
                if at
                else ["", ""]
            )
        row.append(zoo._spread(results["rows"].get(CLAP, {}).get(choice, {}).get("unanswerable")))
        checked = targets(results, choice)
        missed = [label for label, met, _ in checked if met is False]
        row.append(", ".join(missed) or ("none" if any(m for _, m, _ in checked) else ""))
        table.append(row)
    return header, table


TARGETS = (
    f"held-out FPR <= {FPR_BOUND:.2f} on every corpus",
    f"left-out flagged >= relevance alone + {GAIN_BOUND} on every corpus",
    f"{CLAP} unanswerable (title indexed) flagged >= {UNANSWERABLE_BOUND}",
    f"p50 added <= {LATENCY_BOUND - 1:.0%} on every corpus",
)


def targets_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """A row per target, a column per choice: the worst corpus's value, met or missed."""
    choices = results["choices"]
    found = {choice: targets(results, choice) for choice in choices}
    table = []
    for i, target in enumerate(TARGETS):
        cells = []
        for choice in choices:
            _, met, value = found[choice][i]
            cells.append(value if met is None else f"{value} {'met' if met else 'missed'}")
        table.append([target, *cells])
    return ["target (worst corpus)", *choices], table


COLUMNS = (
    ("left_out", "left-out flagged"),
    ("gain", "gain over relevance alone"),
    ("unanswerable", f"{CLAP} unanswerable flagged"),
    ("fpr", "held-out FPR (false 'I don't know')"),
    ("auroc", "AUROC (in vs left out)"),
    ("level", "level each test runs at"),
    ("null_top", "calibration tied at the top score"),
    ("p50_ms", "decide p50 ms"),
    ("p50_ratio", "p50 x relevance alone"),
)


def corpus_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per corpus x choice: each measure's mean ± sd over seeds."""
    header = ["corpus", "choice", *(label for _, label in COLUMNS)]
    table = []
    for corpus, found in results["rows"].items():
        for choice in results["choices"]:
            measured = found.get(choice, {})
            cells = [
                zoo._spread(gains(results, corpus, choice) if m == "gain" else measured.get(m))
                for m, _ in COLUMNS
            ]
            table.append([corpus, choice, *cells])
    return header, table


def sizes_table(results: dict) -> tuple[list[str], list[list[str]]]:
    names = SIZE_COLUMNS  # fixed: the raw file keeps its keys sorted
    header = ["corpus", *names, "index build s", "run s (all seeds)"]
    table = []
    for corpus, sizes in results["sizes"].items():
        build = results["build_s"].get(corpus) or {}
        seconds = build.get("seconds")
        cell = (
            "cached" if seconds is None else f"{seconds:.0f}" + (" (earlier run)" * build["cached"])
        )
        run_s = f"{results['seconds'].get(corpus, 0):.0f}"
        table.append([corpus, *(f"{sizes.get(n, 0):,}" for n in names), cell, run_s])
    return header, table


# ----------------------------------------------------------------------------- markdown
def intro(results: dict) -> str:
    n = len(results["seeds"])
    skipped = "".join(f" Skipped {c}: {r}." for c, r in results["skipped"].items())
    return (
        f"MiniLM; knowledge bases indexed as `ragbound index` does by default (200-word "
        f"chunks, 40 overlap, chunk units); mean ± sd over {n} seed{'s' * (n > 1)}. KnowOrNot's "
        f"leave-one-out construction: a seeded {results['leave']:.0%} (rounded) of the source "
        "documents left out of the index: PubMedQA's abstracts; COVID-QA's paragraphs (each "
        "article cut at its lines, a quarter of each article's paragraphs out; a question is "
        "left out when its `answer_start` lies in a left-out paragraph: on the topic, the "
        "answer gone); BANKING77-OOS's intents (training queries indexed, the intent as the "
        "document; the validation and test queries asked); CLAP NQ's titles. The kept "
        "documents' answerable questions are split in halves: one calibrates, the other is the "
        f"held-out in-knowledge test. {CLAP}'s unanswerable questions whose title is indexed "
        "are scored apart. Rows: relevance alone = `Guard.calibrate(kb, questions)` (MSS); "
        'relevance + coverage = `answerability="coverage"`, decided by `Gate.decide_many` '
        "(abstain when either test flags; both run at the level `shared_alpha` gives, so that "
        f"at most alpha = {results['alpha']} of the calibration questions are flagged by "
        "either; the gate runs coverage only on the questions relevance lets through, and "
        "coverage's score on every question, for the diagnostic and the AUROC, comes from "
        f"`guard.answers.verdicts` on the same search); coverage alone = its p-value <= "
        f"{results['alpha']} (a diagnostic); the "
        "best-sentence cosine (minus the largest cosine between the question and a sentence "
        "of its 5 nearest chunks, the sentences embedded with MiniLM: not shipped, a "
        "diagnostic) alone and with relevance at their shared level. Flagged = share of a "
        "set the row abstains on; gain = left-out flagged minus relevance alone's, paired by "
        "seed; held-out FPR = in-knowledge test questions flagged; AUROC on the row's score "
        "(two tests: minus the smaller of their p-values, what the union decides on); "
        "calibration tied at the top score: the share of calibration questions at a single "
        "test's largest score (coverage 1: no sentence holds any of the question's words), "
        "above alpha no p-value can reach alpha; "
        f"latency: p50 of `Gate.decide(q)`, one question at a time, on {results['latency_n']} "
        "seeded held-out and left-out questions per split, a plain (uncached) embedder, the "
        "gate without and with the answerability test interleaved query by query in one run "
        "(`benchmarks.timing.paired_latency`); OMP_NUM_THREADS="
        f"{results.get('omp_num_threads', 'unset')}." + skipped
    )


def answerability_markdown(results: dict) -> list[str]:
    if not results.get("rows"):
        return []
    s_header, s_rows = summary_table(results)
    t_header, t_rows = targets_table(results)
    header, rows = corpus_table(results)
    z_header, z_rows = sizes_table(results)
    return [
        intro(results),
        "",
        "**Summary per choice** (mean over corpora; worst corpus: the lowest flagged, gain "
        "and AUROC, the highest FPR and latency ratio)",
        "",
        *markdown_table(s_header, s_rows),
        "",
        "**The issue's targets** (each choice's worst corpus, mean over seeds)",
        "",
        *markdown_table(t_header, t_rows),
        "",
        "**Per corpus**",
        "",
        *markdown_table(header, rows),
        "",
        "**Sizes and run time** (last seed's split; the whole run took "
        f"{results.get('total_s', 0.0) / 60:.1f} min; knowledge bases and embeddings cached "
        "under bench_out/ for reruns)",
        "",
        *markdown_table(z_header, z_rows),
    ]


def ordered(results: dict) -> dict:
    """``results`` as read back from bench_out/answerability.json in the corpora's order."""
    by_corpus = ("rows", "sizes", "seconds", "build_s", "skipped")
    return results | {
        key: {c: results[key][c] for c in CORPORA if c in results.get(key, {})} for key in by_corpus
    }


def write(results: dict) -> Path | None:
    lines = answerability_markdown(results)
    return write_section("answerability", TITLE, "\n".join(lines)) if lines else None


def main(argv: Sequence[str] = ()) -> dict:
    """Run the benchmark, save its raw numbers and write its section; ``render``: write the
    section again from the saved raw numbers, measuring nothing."""
    measure = functools.partial(answerability_part, save=lambda found: write_json(RAW, found))
    results = ordered(measured_or_saved(argv, RAW, measure, "answerability"))
    written = write(results)
    if written:
        print(f"raw numbers: {RAW}; tables written to {written}")
    print("\n".join(markdown_table(*summary_table(results))) if results["rows"] else "nothing ran")
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
