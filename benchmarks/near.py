"""Near out-of-knowledge benchmark (issue 16): questions next to what the corpus covers.

Set-ups, each repeated over seeded splits (``BENCH_NEAR_SEEDS``, default 5; mean and spread):

- **COVID-QA halves**: the articles of a random half are indexed (MiniLM, 200-word chunks);
  their questions are split in two, one half calibrates, the other is the in-knowledge test
  (false-positive rate at alpha = 0.05); the questions about the other half's articles are
  near out-of-knowledge (AUROC, and the share flagged at alpha = 0.05).
- **PubMedQA leave-half-out**: the abstracts of half the PQA-L questions are indexed; that
  half's questions are in knowledge (calibration / test as above), the other half's are near
  out-of-knowledge.
- **Far** (the existing rows): the whole PubMedQA corpus, half its questions calibrate, the
  other half are in knowledge; MMLU-Med and TruthfulQA are out of knowledge. A gain on the near
  sets must not hide a loss here.

Rows: today's statistics at several k (the baseline), at each granularity (chunk, sentence,
window, all three); every p-value is conformal on the calibration half, as ``check``
computes it. ``combined`` and ``auto`` are calibrated by the code ``ragbound calibrate
--statistic combined | auto`` runs, with its defaults, on the calibration half (which they
split into a learning and a conformal part), and tested as ``ragbound decide`` does.

Cost table: vectors searched (count and MB) at each granularity, and ``check`` latency p50 on
the whole PubMedQA knowledge base against embedding the query alone (one thread: run with
OMP_NUM_THREADS=1). Knowledge bases and query embeddings are cached under bench_out/near/.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table
from benchmarks.timing import latency, timed
from ragbound.corpus import Document, load_documents
from ragbound.corpus.units import unit_params
from ragbound.detect import Guard
from ragbound.detect.boundary import BoundaryDetector
from ragbound.detect.combined import (
    DOCUMENT_GAP,
    OVERLAP,
    QUERY_SIMILARITY,
    SENTENCE_OVERLAP,
    QueryFeatures,
    feature_depth,
)
from ragbound.detect.evaluate import split_queries
from ragbound.detect.select import LEARN_SHARE
from ragbound.embedders import load_dense_embedder
from ragbound.embedders.sentence import SentenceTransformerEmbedder
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import EmpiricalNull, auroc
from ragbound.stats.combined import LinearScore, stack_features

SPEC = "minilm"  # the embedder of every knowledge base
ALPHA = 0.05
K_MAX = 32
INDEXED = "chunk,sentence,window"
WINDOW_SENTENCES = 3
GRANULARITIES = ("chunk", "sentence", "window", "chunk,sentence,window")
# today's statistics: (name, k); mss reads only the nearest neighbour
STATISTICS: tuple[tuple[str, int], ...] = (
    ("mss", 1),
    *(
        (name, k)
        for name in ("knn", "avgknn", "entropy", "energy", "fisher", "simes")
        for k in (4, 32)
    ),
)
NEAR_SETS = ("COVID-QA halves", "PubMedQA half")
# calibrate --statistic values that learn on part of the calibration half
LEARNED = ("combined", "auto")
FAR_SETS = ("MMLU-Med", "TruthfulQA")
# each signal's share of the combined score: the same learning and null without it
ABLATIONS: dict[str, tuple[str, ...]] = {
    "combined without the document gap": (DOCUMENT_GAP,),
    "combined without the sentence overlap": (SENTENCE_OVERLAP,),
    "combined without word overlap": (OVERLAP, SENTENCE_OVERLAP),
    "combined without query similarity": (QUERY_SIMILARITY,),
}
LATENCY_QUERIES = 100


@dataclass
class Split:
    """One seeded split: a knowledge base and its calibration, in-knowledge and OoK queries."""

    kb: KnowledgeBase
    calibration: list[str]
    inside: list[str]
    outside: dict[str, list[str]]


class CachedEmbedder(SentenceTransformerEmbedder):
    """A dense embedder whose query embeddings are kept in memory and in ``folder``."""

    def __init__(self, model: SentenceTransformerEmbedder, folder: Path):
        super().__init__(model.folder, name=model.name)
        self._cache_dir = folder
        self._texts: list[str] = []
        self._vectors = np.empty((0, 0), np.float32)
        if (folder / "queries.json").is_file():
            self._texts = json.loads((folder / "queries.json").read_text())
            self._vectors = np.load(folder / "queries.npy")
        self._row = {text: i for i, text in enumerate(self._texts)}

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._row))
        if missing:
            new = super().encode(missing, batch_size=batch_size, progress=progress)
            self._vectors = new if not self._texts else np.concatenate([self._vectors, new])
            for text in missing:
                self._row[text] = len(self._texts)
                self._texts.append(text)
            self._cache_dir.mkdir(parents=True, exist_ok=True)
            (self._cache_dir / "queries.json").write_text(json.dumps(self._texts))
            np.save(self._cache_dir / "queries.npy", self._vectors)
        return self._vectors[[self._row[t] for t in texts]]

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])


# ----------------------------------------------------------------------- knowledge bases
def cached_kb(
    folder: Path,
    documents: Callable[[], list[Document]],
    embedder: CachedEmbedder,
    spec: str,
    granularity: str = INDEXED,
) -> tuple[KnowledgeBase, float | None]:
    """The knowledge base saved in ``folder`` (units of ``granularity``, default all three;
    embedder ``spec``), built if absent or stale.

    Returns it and the build seconds (None when it came from the cache).
    """
    units = unit_params(granularity, WINDOW_SENTENCES)
    try:
        kb = KnowledgeBase.load(folder, embedder=embedder)
        if kb.manifest.units == units:
            return kb, None
    except (ArtifactError, InputError):
        pass
    kb, seconds = timed(
        lambda: KnowledgeBase.from_documents(documents(), embedder=spec, units=units, progress=True)
    )
    kb.save(folder, overwrite=True, delete_other_files=True)
    return KnowledgeBase.load(folder, embedder=embedder), seconds


def covid_documents() -> list[Document]:
    return [
        Document(id=doc_id, text=text, source=f"covidqa/{doc_id}")
        for doc_id, text in datasets.covidqa_articles().items()
    ]


def pubmedqa_documents(out: Path) -> Callable[[], list[Document]]:
    """The PQA-L abstract paragraphs as the other benchmark parts index them (pmid metadata)."""
    corpus = out / "pubmedqa_corpus.jsonl"
    return lambda: load_documents(
        [datasets.write_pubmedqa_corpus(corpus)], id_field=datasets.CORPUS_IDS
    )


# ------------------------------------------------------------------------------ splits
def covid_split(kb: KnowledgeBase, seed: int) -> Split:
    """Half the articles indexed; their questions in, the others' out (near)."""
    articles = sorted({chunk.doc_id for chunk in kb.chunks})
    rng = np.random.default_rng(seed)
    inside_docs = set(rng.permutation(articles)[: len(articles) // 2].tolist())
    questions = datasets.covidqa_questions()
    inside = [q for doc, q in questions if doc in inside_docs]
    calibration, test = split_queries(inside, 0.5, seed=seed)
    outside = [q for doc, q in questions if doc not in inside_docs]
    return Split(kb.restricted_to(inside_docs), calibration, test, {NEAR_SETS[0]: outside})


def pubmedqa_split(kb: KnowledgeBase, seed: int) -> Split:
    """The abstracts of half the PQA-L questions indexed; the other half's questions are out."""
    by_pmid = datasets.pubmedqa_questions_by_pmid()
    rng = np.random.default_rng(seed)
    pmids = rng.permutation(sorted(by_pmid)).tolist()
    kept = set(pmids[: len(pmids) // 2])
    docs = {chunk.doc_id for chunk in kb.chunks if chunk.metadata.get("pmid") in kept}
    calibration, test = split_queries([by_pmid[p] for p in sorted(kept)], 0.5, seed=seed)
    outside = [by_pmid[p] for p in pmids if p not in kept]
    return Split(kb.restricted_to(docs), calibration, test, {NEAR_SETS[1]: outside})


def far_split(kb: KnowledgeBase, seed: int) -> Split:
    """The paper's set-up: whole PubMedQA corpus, MMLU-Med and TruthfulQA out of knowledge."""
    calibration, test = split_queries(datasets.pubmedqa_questions(), 0.5, seed=seed)
    outside = {
        FAR_SETS[0]: datasets.mmlu_med_questions(),
        FAR_SETS[1]: datasets.truthfulqa_questions(),
    }
    return Split(kb, calibration, test, outside)


# ------------------------------------------------------------------------------ scoring
def quality(cal: np.ndarray, inside: np.ndarray, outside: np.ndarray) -> dict[str, float]:
    """AUROC, OoK share flagged and IK false-positive rate at ALPHA (conformal p-values)."""
    null = EmpiricalNull(cal)
    return {
        "auroc": auroc(inside, outside),
        "flagged": float(np.mean(null.p_values(outside) <= ALPHA)),
        "fpr": float(np.mean(null.p_values(inside) <= ALPHA)),
    }


def statistic_rows(split: Split, granularity: str) -> dict[str, dict[str, dict]]:
    """Row name -> OoK set -> quality, for every statistic at this granularity."""
    kb = split.kb.at_granularity(granularity)
    sets = {"cal": split.calibration, "in": split.inside, **split.outside}
    sims = {name: kb.search(queries, K_MAX).similarities for name, queries in sets.items()}
    rows: dict[str, dict[str, dict]] = {}
    for statistic, k in STATISTICS:
        detector = BoundaryDetector(statistic=statistic, k=k).fit(sims["cal"])
        scores = {name: detector.score(s) for name, s in sims.items()}
        rows[row_name(granularity, statistic, k)] = {
            name: quality(detector.decision_scores_, scores["in"], scores[name])
            for name in split.outside
        }
    return rows


def learned_rows(split: Split, picks: dict[str, list[str]]) -> dict[str, dict[str, dict]]:
    """The combined and auto rows, calibrated as ``ragbound calibrate --statistic NAME``
    (default options) does on the calibration half: it learns on part of it and makes the
    null from the rest; the test queries are tested as ``ragbound decide`` does. Appends
    what auto picked to ``picks`` (per out-of-knowledge set)."""
    rows: dict[str, dict[str, dict]] = {}
    for statistic in LEARNED:
        guard = Guard.calibrate(split.kb, split.calibration, statistic=statistic)
        inside = guard.check_many(split.inside, evidence=0)
        rows[statistic] = {}
        for name, queries in split.outside.items():
            outside = guard.check_many(queries, evidence=0)
            rows[statistic][name] = {
                "auroc": auroc([v.score for v in inside], [v.score for v in outside]),
                "flagged": float(np.mean([v.out_of_knowledge for v in outside])),
                "fpr": float(np.mean([v.out_of_knowledge for v in inside])),
            }
            selection = guard.calibration.manifest.selection
            if selection is not None:
                picks.setdefault(name, []).append(selection.picked.label)
    return rows


def ablation_rows(split: Split) -> dict[str, dict[str, dict]]:
    """The combined score learned without some of its signals (:data:`ABLATIONS`), on the
    learning / conformal parts ``calibrate --statistic combined`` uses (seed 0)."""
    kb = split.kb
    learning, conformal = split_queries(list(split.calibration), LEARN_SHARE, seed=0)
    learned = QueryFeatures(kb, learning, feature_depth(kb), masked=True)
    sets = {"null": conformal, "in": split.inside, **split.outside}
    found = {
        name: QueryFeatures(kb, queries, learned.depth, references=learned.references)
        for name, queries in sets.items()
    }
    rows: dict[str, dict[str, dict]] = {}
    for row, dropped in ABLATIONS.items():
        names = tuple(n for n in learned.names() if n not in dropped)
        inside, outside = (
            stack_features(f, names) for f in (learned.features, learned.masked_features)
        )
        model = LinearScore.fit(names, inside, outside)
        score = {name: model.score(stack_features(f.features, names)) for name, f in found.items()}
        rows[row] = {
            name: quality(score["null"], score["in"], score[name]) for name in split.outside
        }
    return rows


def row_name(granularity: str, statistic: str, k: int) -> str:
    return f"{granularity} {statistic}" + ("" if statistic == "mss" else f" k={k}")


def split_rows(split: Split, picks: dict[str, list[str]]) -> dict[str, dict[str, dict]]:
    rows: dict[str, dict[str, dict]] = {}
    for granularity in GRANULARITIES:
        rows |= statistic_rows(split, granularity)
    return rows | learned_rows(split, picks) | ablation_rows(split)


def collect(rows: dict[str, dict[str, dict[str, list[float]]]], new: dict) -> None:
    """Append one split's qualities to the per-seed lists."""
    for row, sets in new.items():
        for name, metrics in sets.items():
            target = rows.setdefault(row, {}).setdefault(name, {})
            for metric, value in metrics.items():
                target.setdefault(metric, []).append(value)


# --------------------------------------------------------------------------------- cost
def cost(kbs: dict[str, KnowledgeBase], far: Split) -> dict:
    """Vectors searched per granularity, and check latency on the whole PubMedQA base (its
    query embeddings not cached)."""
    import torch

    torch.set_num_threads(1)  # one thread, as OMP_NUM_THREADS=1: the machine is shared
    plain = KnowledgeBase.load(kbs["PubMedQA"].path, embedder=load_dense_embedder(SPEC))
    out: dict = {}
    for granularity in GRANULARITIES:
        entry: dict = {}
        for name, kb in kbs.items():
            rows, nbytes = kb.at_granularity(granularity).index_size()
            entry[name] = {"vectors": rows, "mb": nbytes / 2**20}
        guard = Guard.calibrate(far.kb, far.calibration, granularity=granularity, k=K_MAX)
        timed_guard = Guard(plain, guard.calibration)
        entry["latency"] = latency(timed_guard, far.inside[:LATENCY_QUERIES])
        out[granularity] = entry
    # the learned score searches every indexed unit once per view, plus word overlap
    learned = Guard.calibrate(far.kb, far.calibration, statistic="combined")
    out["combined"] = {
        **{name: out[INDEXED][name] for name in kbs},
        "latency": latency(Guard(plain, learned.calibration), far.inside[:LATENCY_QUERIES]),
    }
    return out


def knowledge_bases(out: Path) -> tuple[dict[str, KnowledgeBase], dict]:
    """The COVID-QA and PubMedQA knowledge bases (cached under bench_out/near/), and their
    build seconds (None when cached)."""
    cache = out / "near"
    embedder = CachedEmbedder(load_dense_embedder(SPEC), cache / "query-cache")
    built = {
        "COVID-QA": cached_kb(cache / "kb-covidqa", covid_documents, embedder, SPEC),
        "PubMedQA": cached_kb(cache / "kb-pubmedqa", pubmedqa_documents(out), embedder, SPEC),
    }
    return {name: kb for name, (kb, _) in built.items()}, {n: s for n, (_, s) in built.items()}


# --------------------------------------------------------------------------------- part
def near_part(out: Path) -> dict:
    """Run every split of every set-up; returns the results saved under ``near``."""
    reason = datasets.missing_reason() or datasets.covidqa_missing_reason()
    if reason:
        return {"skipped": reason}
    seeds = list(range(int(os.environ.get("BENCH_NEAR_SEEDS", "5"))))
    kbs, build_s = knowledge_bases(out)
    setups = [(covid_split, "COVID-QA"), (pubmedqa_split, "PubMedQA"), (far_split, "PubMedQA")]
    rows: dict = {}
    picks: dict[str, list[str]] = {}
    for seed in seeds:
        for make, corpus in setups:
            collect(rows, split_rows(make(kbs[corpus], seed), picks))
    return {
        "embedder": SPEC,
        "corpora": list(kbs),
        "seeds": seeds,
        "alpha": ALPHA,
        "rows": rows,
        "auto_picks": picks,
        "build_s": build_s,
        "n_documents": {name: kb.manifest.n_documents for name, kb in kbs.items()},
        "cost": cost(kbs, far_split(kbs["PubMedQA"], 0)),
    }


# ----------------------------------------------------------------------------- markdown
def _spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


QUALITY_COLUMNS = (
    (NEAR_SETS[0], "auroc", "COVID-QA AUROC"),
    (NEAR_SETS[0], "flagged", "COVID-QA flagged"),
    (NEAR_SETS[0], "fpr", "COVID-QA FPR"),
    (NEAR_SETS[1], "auroc", "PubMedQA-half AUROC"),
    (NEAR_SETS[1], "flagged", "PubMedQA-half flagged"),
    (NEAR_SETS[1], "fpr", "PubMedQA-half FPR"),
    (FAR_SETS[0], "auroc", "MMLU-Med AUROC"),
    (FAR_SETS[1], "auroc", "TruthfulQA AUROC"),
    (FAR_SETS[0], "fpr", "far FPR"),
)


def quality_table(part: dict) -> tuple[list[str], list[list[str]]]:
    """One row per statistic x granularity (and added score), a column per set x metric."""
    header = ["row", *(label for _, _, label in QUALITY_COLUMNS)]
    table = []
    for name, sets in part["rows"].items():
        cells = [_spread(sets[s][metric]) if s in sets else "" for s, metric, _ in QUALITY_COLUMNS]
        table.append([name, *cells])
    return header, table


def cost_table(part: dict) -> tuple[list[str], list[list[str]]]:
    header = [
        "granularity",
        "COVID-QA vectors",
        "COVID-QA MB",
        "PubMedQA vectors",
        "PubMedQA MB",
        "check p50 ms",
        "embed p50 ms",
        "check / embed",
    ]
    table = []
    for granularity, entry in part["cost"].items():
        lat = entry["latency"]
        table.append(
            [
                granularity,
                f"{entry['COVID-QA']['vectors']:,}",
                f"{entry['COVID-QA']['mb']:.1f}",
                f"{entry['PubMedQA']['vectors']:,}",
                f"{entry['PubMedQA']['mb']:.1f}",
                f"{lat['check_p50_ms']:.2f}",
                f"{lat['embed_p50_ms']:.2f}",
                f"{lat['ratio_p50']:.2f}",
            ]
        )
    return header, table


def _picks(picks: dict[str, list[str]]) -> str:
    """What auto picked per set, with how many splits: ``COVID-QA halves: combined (3/3)``."""
    parts = []
    for name, labels in picks.items():
        counted = ", ".join(
            f"{label} ({labels.count(label)}/{len(labels)})" for label in dict.fromkeys(labels)
        )
        parts.append(f"{name}: {counted}")
    return "; ".join(parts) or "nothing (no run)"


def near_markdown(results: dict) -> list[str]:
    part = results.get("near")
    if not part or "rows" not in part:
        return []
    header, rows = quality_table(part)
    cost_header, cost_rows = cost_table(part)
    n = len(part["seeds"])
    return [
        f"MiniLM, 200-word chunks (40 overlap); windows of {WINDOW_SENTENCES} sentences. "
        f"Mean ± standard deviation over {n} seeded splits. "
        + SETUP_TEXT
        + "auto picked: "
        + _picks(part.get("auto_picks", {}))
        + ".",
        "",
        *markdown_table(header, rows),
        "",
        *_cost_lines(cost_header, cost_rows),
    ]


SETUP_TEXT = (
    "COVID-QA halves: the articles of "
    "one half indexed, half their questions calibrate, the other half are the in-knowledge "
    "test, the other articles' questions are near out-of-knowledge. PubMedQA half: the "
    "abstracts of half the PQA-L questions indexed, the other half's questions near "
    "out-of-knowledge. Far: the whole PubMedQA corpus, half its questions calibrate, the "
    "other half are in knowledge. AUROC over all test queries; flagged = share of "
    f"out-of-knowledge questions with p <= {ALPHA}; FPR = share of held-out "
    f"in-knowledge questions with p <= {ALPHA} (conformal p-values). A row is "
    "granularity + statistic (+ k): the units a chunk is scored by (its best one). "
    "combined / auto: `ragbound calibrate --statistic combined | auto` with its defaults "
    "on the calibration half (half of it learns, by leaving each question's document out "
    "of the search; the other half alone makes the null), tested as `ragbound decide` "
    "does; "
)


def _cost_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "**What each granularity costs** (vectors searched; `check` p50 on the whole PubMedQA "
        f"knowledge base, k = {K_MAX}, {LATENCY_QUERIES} queries, one thread, against "
        "embedding the query alone in the same run; combined: every unit indexed, searched "
        "once per granularity, plus word overlap)",
        "",
        *markdown_table(header, rows),
    ]
