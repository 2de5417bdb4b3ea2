"""The corpus zoo (issue 29, item 1): every choice the project makes for the user, on every
corpus here, judged against the default.

Corpora (MiniLM, the bundled default embedder; knowledge bases indexed as ``ragbound index``
does by default: 200-word chunks, 40 words of overlap, chunk units only):

- **PubMedQA**: the PQA-L abstracts; half the PQA-L questions calibrate, the other half are
  the in-knowledge test; MMLU-Med is near out-of-knowledge (the paper's Table 1b set-up).
- **PubMedQA-half** and **COVID-QA halves**: :mod:`benchmarks.near`'s splits (the documents of
  a random half indexed; questions about the other half are near out-of-knowledge).
- **BANKING77-OOS**: the training queries (5,903 not blank) indexed, each record its own
  document; 1,000 of the validation queries calibrate; 1,000 in-scope test queries against
  1,000 in-domain out-of-scope test queries (near: same bank, an intent the knowledge does
  not cover).
- **CLAP NQ**: the Wikipedia passages (one document per title), the titles split in random
  halves; the indexed half's answerable questions calibrate (half) and test (the other half),
  the left-out half's answerable questions are near. The unanswerable questions (a passage on
  the topic that lacks the answer) are reported apart, on indexed and on left-out titles.

TruthfulQA is the far set beside every corpus. Choices (rows): the default (``Guard.calibrate``
with no options: MSS), each statistic of :data:`ragbound.stats.STATISTICS` at the default k,
``combined`` and ``auto`` (``Guard.calibrate(..., statistic=NAME, seed=SEED)``); each checked as
``ragbound decide`` does (``Guard.score``: conformal p-values, flagged when p <= alpha).

``BENCH_ZOO_SYNTH=1`` runs the synthetic-calibration zoo instead (issue 29, item 3): the
default beside MSS (``Guard.calibrate(kb, questions)``) calibrated on ``BENCH_ZOO_SYNTH_N``
(default 100) questions the bundled local LLM writes per split, alone, with 20, 50 or 100 of
the split's real calibration questions (one seeded sample, so 20 within 50 within 100) or with
all of them, and on 20, 50 or 100 real questions alone (:data:`SYNTH_MIXES`). Slow on 2 cores
(opt-in; replies cached in ``~/.cache/ragbound/llm``, so a rerun is cheap); raw numbers to
bench_out/zoo_synth.json, tables to the ``zoo-synth`` section (the ``zoo`` section untouched).

Columns: AUROC (in-knowledge test vs near), the share of near flagged at alpha = 0.05, the
held-out false-positive rate at alpha = 0.05 (in-knowledge questions the calibration did not
see), AUROC and share flagged on the far set; mean ± sd over ``BENCH_ZOO_SEEDS`` seeds (default
3). "loss against the default" is the default's AUROC minus the choice's, paired by seed (mean ±
sd of the paired differences); the summary gives, per choice, the mean over corpora and the
worst corpus. ``BENCH_ZOO_CORPORA`` (comma-separated) runs some corpora only.

``make bench-zoo`` or ``python -m benchmarks.run zoo`` (``zoo render``: the section again from
the saved raw numbers, measuring nothing; with ``BENCH_ZOO_SYNTH=1``, the ``zoo-synth`` one).
Knowledge bases and query embeddings are cached under bench_out/zoo/; raw numbers go to
bench_out/zoo.json, the tables to the ``zoo`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import datasets, near
from benchmarks.doc import markdown_table, write_section
from benchmarks.settings import int_value
from ragbound.artifacts import write_json
from ragbound.corpus import Document
from ragbound.detect import Guard
from ragbound.detect.config import AUTO, COMBINED
from ragbound.detect.evaluate import split_queries
from ragbound.embedders import load_dense_embedder
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import STATISTICS, auroc

OUT = datasets.REPO / "bench_out"
CACHE = OUT / "zoo"
SPEC = "minilm"
GRANULARITY = "chunk"  # what ``ragbound index`` indexes by default
ALPHA = 0.05
DEFAULT = "default (mss)"
SYNTH_ONLY = "synthetic only (mss)"
SYNTH_PLUS_REAL = "synthetic + real (mss)"
CHOICES: tuple[str, ...] = (DEFAULT, *STATISTICS, COMBINED, AUTO)
REAL_COUNTS = (20, 50, 100)
# the synthetic zoo's choices (MSS): name -> (with the synthetic questions, how many real
# calibration questions: None all of them)
SYNTH_MIXES: dict[str, tuple[bool, int | None]] = {
    SYNTH_ONLY: (True, 0),
    **{f"synthetic + {n} real (mss)": (True, n) for n in REAL_COUNTS},
    SYNTH_PLUS_REAL: (True, None),
    **{f"{n} real (mss)": (False, n) for n in REAL_COUNTS},
}
SYNTH_CHOICES = (DEFAULT, *SYNTH_MIXES)
FPR_SLACK = 0.02  # "the FPR is back": at most ALPHA + FPR_SLACK on every corpus
BY_INTENT = "BANKING77-OOS by intent"
CORPORA = (
    "PubMedQA",
    "PubMedQA-half",
    "COVID-QA halves",
    "BANKING77-OOS",
    BY_INTENT,
    "CLAP NQ",
)
# the same questions as another corpus, another document id: not counted again in the summary
VARIANTS = (BY_INTENT,)
FAR = "TruthfulQA"
BANKING_N = 1000  # calibration, in-scope test and out-of-scope test queries per seed
UNANSWERABLE_IN = "unanswerable, title indexed"
UNANSWERABLE_OUT = "unanswerable, title left out"
METRICS = ("auroc", "flagged", "fpr", "far_auroc", "far_flagged")


@dataclass
class ZooSplit:
    """One seeded split of a corpus: its knowledge base, calibration and test questions."""

    kb: KnowledgeBase
    calibration: list[str]
    inside: list[str]
    near: list[str]
    far: list[str]
    apart: dict[str, list[str]] = field(default_factory=dict)
    # the split's synthetic questions (BENCH_ZOO_SYNTH=1 only)
    synthetic: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        return {
            "documents": len({chunk.doc_id for chunk in self.kb.chunks}),
            "chunks": len(self.kb.chunks),
            "calibration": len(self.calibration),
            "in-knowledge test": len(self.inside),
            "near": len(self.near),
            "far": len(self.far),
            **{name: len(queries) for name, queries in self.apart.items()},
        }


# ----------------------------------------------------------------------- knowledge bases
def banking_documents(by_intent: bool = False) -> list[Document]:
    """The BANKING77-OOS training queries (5,903 not blank), each record its own document, or
    (``by_intent``) each record's document id its intent: the 118 or so records of an intent
    are one document for leave-documents-out. ``ragbound index --id-field`` refuses repeated
    ids; ``KnowledgeBase.from_documents`` takes them as given."""
    return [
        Document(
            id=y if by_intent else f"train-{i}",
            text=query,
            source="banking77oos/train",
            metadata={"intent": y},
        )
        for i, (query, y) in enumerate(datasets.banking77oos("train"))
    ]


def clapnq_documents() -> list[Document]:
    """The CLAP NQ passages (answerable and unanswerable questions'), one document per
    Wikipedia title (its distinct passages joined)."""
    passages: dict[str, list[str]] = {}
    for kind in datasets.CLAPNQ_KINDS:
        for row in datasets.clapnq(kind):
            texts = passages.setdefault(row["title"], [])
            if row["text"] not in texts:
                texts.append(row["text"])
    return [
        Document(id=title, text="\n\n".join(texts), source="clapnq", metadata={"title": title})
        for title, texts in passages.items()
    ]


KB_FOLDERS: dict[str, tuple[str, Callable[[Path], Callable[[], list[Document]]]]] = {
    "PubMedQA": ("kb-pubmedqa", near.pubmedqa_documents),
    "COVID-QA": ("kb-covidqa", lambda out: near.covid_documents),
    "BANKING77-OOS": ("kb-banking77oos", lambda out: banking_documents),
    BY_INTENT: ("kb-banking77oos-by-intent", lambda out: lambda: banking_documents(True)),
    "CLAP NQ": ("kb-clapnq", lambda out: clapnq_documents),
}
# corpus -> the knowledge base it splits
KB_OF = {
    "PubMedQA": "PubMedQA",
    "PubMedQA-half": "PubMedQA",
    "COVID-QA halves": "COVID-QA",
    "BANKING77-OOS": "BANKING77-OOS",
    BY_INTENT: BY_INTENT,
    "CLAP NQ": "CLAP NQ",
}


def knowledge_base(
    name: str, cache: Path, out: Path, embedder: near.CachedEmbedder
) -> tuple[KnowledgeBase, dict]:
    """Knowledge base ``name`` from ``cache`` (built when absent or stale), and how long its
    build took: {seconds, cached} (seconds None when it came from an older cache)."""
    folder, documents = KB_FOLDERS[name]
    kb, seconds = near.cached_kb(cache / folder, documents(out), embedder, SPEC, GRANULARITY)
    timing = cache / f"{folder}.build.json"
    if seconds is not None:
        write_json(timing, {"seconds": seconds})
        return kb, {"seconds": seconds, "cached": False}
    found = json.loads(timing.read_text()) if timing.is_file() else {}
    return kb, {"seconds": found.get("seconds"), "cached": True}


def missing_reason(corpus: str) -> str | None:
    """Why ``corpus`` cannot run here (a data set absent), or None."""
    reasons = {
        "PubMedQA": datasets.missing_reason,
        "COVID-QA": datasets.covidqa_missing_reason,
        "BANKING77-OOS": datasets.banking77oos_missing_reason,
        BY_INTENT: datasets.banking77oos_missing_reason,
        "CLAP NQ": datasets.clapnq_missing_reason,
    }
    # every corpus needs TruthfulQA (far), which missing_reason checks with PubMedQA
    return datasets.missing_reason() or reasons[KB_OF[corpus]]()


# ------------------------------------------------------------------------------ splits
def _sample(items: Sequence[str], n: int, rng: np.random.Generator) -> list[str]:
    picked = rng.permutation(len(items))[: min(n, len(items))]
    return [items[i] for i in sorted(picked)]


def pubmedqa_split(kb: KnowledgeBase, seed: int) -> ZooSplit:
    split = near.far_split(kb, seed)
    far = split.outside[near.FAR_SETS[1]]
    return ZooSplit(kb, split.calibration, split.inside, split.outside[near.FAR_SETS[0]], far)


def pubmedqa_half_split(kb: KnowledgeBase, seed: int) -> ZooSplit:
    split = near.pubmedqa_split(kb, seed)
    outside = split.outside[near.NEAR_SETS[1]]
    return ZooSplit(split.kb, split.calibration, split.inside, outside, [])


def covid_split(kb: KnowledgeBase, seed: int) -> ZooSplit:
    split = near.covid_split(kb, seed)
    outside = split.outside[near.NEAR_SETS[0]]
    return ZooSplit(split.kb, split.calibration, split.inside, outside, [])


def banking_split(kb: KnowledgeBase, seed: int) -> ZooSplit:
    """Seeded samples of BANKING_N validation (calibration), in-scope test and in-domain
    out-of-scope test queries; the whole index (the training queries) every time."""
    rng = np.random.default_rng(seed)
    calibration = _sample([q for q, _ in datasets.banking77oos("valid")], BANKING_N, rng)
    inside = _sample([q for q, _ in datasets.banking77oos("test")], BANKING_N, rng)
    outside = _sample([q for q, _ in datasets.banking77oos("id-oos_test")], BANKING_N, rng)
    return ZooSplit(kb, calibration, inside, outside, [])


def clapnq_split(kb: KnowledgeBase, seed: int) -> ZooSplit:
    """Half the titles indexed (seeded); their answerable questions split into calibration and
    test halves, the other titles' answerable questions near; unanswerable ones apart."""
    titles = sorted({chunk.doc_id for chunk in kb.chunks})
    rng = np.random.default_rng(seed)
    indexed = set(rng.permutation(titles)[: len(titles) // 2].tolist())
    answerable = datasets.clapnq("answerable")
    unanswerable = datasets.clapnq("unanswerable")
    inside = [row["question"] for row in answerable if row["title"] in indexed]
    calibration, test = split_queries(inside, 0.5, seed=seed)
    outside = [row["question"] for row in answerable if row["title"] not in indexed]
    apart = {
        UNANSWERABLE_IN: [row["question"] for row in unanswerable if row["title"] in indexed],
        UNANSWERABLE_OUT: [row["question"] for row in unanswerable if row["title"] not in indexed],
    }
    return ZooSplit(kb.restricted_to(indexed), calibration, test, outside, [], apart)


SPLITS: dict[str, Callable[[KnowledgeBase, int], ZooSplit]] = {
    "PubMedQA": pubmedqa_split,
    "PubMedQA-half": pubmedqa_half_split,
    "COVID-QA halves": covid_split,
    "BANKING77-OOS": banking_split,
    BY_INTENT: banking_split,
    "CLAP NQ": clapnq_split,
}


# ------------------------------------------------------------------------------ scoring
def mixed_questions(
    synthetic: Sequence[str], real: Sequence[str], n_real: int | None, seed: int
) -> list[str]:
    """``synthetic`` then ``n_real`` of the ``real`` questions (None: all), the first of one
    seeded order: the same seed gives nested samples (20 of them within 50 within 100)."""
    order = np.random.default_rng(seed).permutation(len(real))[:n_real]
    return [*synthetic, *(real[i] for i in (range(len(real)) if n_real is None else order))]


def calibrate(split: ZooSplit, choice: str, seed: int) -> Guard:
    """The guard of ``choice``, as ``ragbound calibrate`` makes it on the split's questions."""
    if choice == DEFAULT:
        return Guard.calibrate(split.kb, split.calibration)
    if choice in (COMBINED, AUTO):
        return Guard.calibrate(split.kb, split.calibration, statistic=choice, seed=seed)
    if choice in SYNTH_MIXES:
        synthetic, real = SYNTH_MIXES[choice]
        questions = mixed_questions(
            split.synthetic if synthetic else [], split.calibration, real, seed
        )
        return Guard.calibrate(split.kb, questions)
    return Guard.calibrate(split.kb, split.calibration, statistic=choice)


def measure(guard: Guard, split: ZooSplit) -> dict:
    """AUROC in vs near, near flagged, held-out FPR, far AUROC / flagged, and the sets apart
    (flagged, AUROC against the in-knowledge test), with ``check``'s p-values."""
    inside = guard.score(split.inside)
    near_set = guard.score(split.near)
    row = {
        "auroc": auroc(inside.scores, near_set.scores),
        "flagged": float(np.mean(near_set.p_values <= ALPHA)),
        "fpr": float(np.mean(inside.p_values <= ALPHA)),
    }
    if split.far:
        far = guard.score(split.far)
        row |= {
            "far_auroc": auroc(inside.scores, far.scores),
            "far_flagged": float(np.mean(far.p_values <= ALPHA)),
        }
    for name, queries in split.apart.items():
        scored = guard.score(queries)
        row[name] = {
            "flagged": float(np.mean(scored.p_values <= ALPHA)),
            "auroc": auroc(inside.scores, scored.scores),
        }
    return row


def picked(guard: Guard) -> str | None:
    """What auto picked (None for the other choices)."""
    selection = guard.calibration.manifest.selection
    return None if selection is None else selection.picked.label


def split_rows(split: ZooSplit, seed: int, choices: Sequence[str]) -> dict[str, dict]:
    """Choice -> its measures on one split (an ``error`` when the calibration is refused)."""
    rows: dict[str, dict] = {}
    for choice in choices:
        start = time.perf_counter()
        try:
            guard = calibrate(split, choice, seed)
        except InputError as exc:
            rows[choice] = {"error": str(exc)}
            continue
        rows[choice] = measure(guard, split) | {"seconds": time.perf_counter() - start}
        if (label := picked(guard)) is not None:
            rows[choice]["picked"] = label
    return rows


# ----------------------------------------------------------------------------- summary
def paired_loss(default: Sequence[float], choice: Sequence[float]) -> tuple[float, float]:
    """Mean and sd over seeds of the default's AUROC minus the choice's (paired by seed)."""
    diff = np.asarray(default, dtype=float) - np.asarray(choice, dtype=float)
    return float(np.mean(diff)), float(np.std(diff))


def worst_loss(rows: dict[str, dict[str, dict]], choice: str) -> dict | None:
    """The largest AUROC loss of ``choice`` against the default over corpora.

    ``rows`` is corpus -> choice -> metric -> per-seed values (as :func:`zoo_part` saves);
    returns {loss, sd, corpus} (loss < 0: a gain on every corpus), or None when the choice
    has no AUROC on any corpus.
    """
    worst: dict | None = None
    for corpus, choices in rows.items():
        found, default = choices.get(choice, {}), choices.get(DEFAULT, {})
        if not found.get("auroc") or not default.get("auroc"):
            continue
        if len(found["auroc"]) != len(default["auroc"]):
            continue  # a seed refused: not paired
        loss, sd = paired_loss(default["auroc"], found["auroc"])
        if worst is None or loss > worst["loss"]:
            worst = {"loss": loss, "sd": sd, "corpus": corpus}
    return worst


def collect(rows: dict, corpus: str, new: dict[str, dict]) -> None:
    """Append one split's measures to corpus -> choice -> metric -> per-seed values."""
    for choice, measures in new.items():
        target = rows.setdefault(corpus, {}).setdefault(choice, {})
        for metric, value in measures.items():
            if isinstance(value, dict):  # a set apart
                for sub, v in value.items():
                    target.setdefault(f"{metric}: {sub}", []).append(v)
            else:
                target.setdefault(metric, []).append(value)


# --------------------------------------------------------------------------------- part
def _corpora() -> list[str]:
    raw = os.environ.get("BENCH_ZOO_CORPORA", ",".join(CORPORA))
    chosen = [c.strip() for c in raw.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in CORPORA]
    if unknown or not chosen:
        raise SystemExit(f"BENCH_ZOO_CORPORA={raw!r}: choose among {', '.join(CORPORA)}")
    return chosen


def synth_enabled() -> bool:
    return os.environ.get("BENCH_ZOO_SYNTH", "0") not in ("", "0")


def synth_n() -> int:
    return int_value("BENCH_ZOO_SYNTH_N", "100", 1, "100")


def timed_local_llm():
    """The bundled local model, its replies cached, summing the seconds of its calls (a
    cached reply keeps its original call's): what writing the questions cost."""
    from benchmarks.local_llm import make_local_llm
    from ragbound.llm import CachedLLM

    class TimedLLM(CachedLLM):
        seconds = 0.0

        async def acomplete(self, *args, **kwargs):
            response = await super().acomplete(*args, **kwargs)
            self.seconds += response.seconds
            return response

    cached = make_local_llm()
    return TimedLLM(cached.llm, cached.cache)


def add_synthetic(split: ZooSplit, corpus: str, seed: int, llm) -> dict:
    """The split's synthetic questions from the local LLM (``ragbound synth``'s defaults);
    how many, the wall seconds of this run and the LLM's seconds (its calls' own time)."""
    from ragbound.synth.queries import generate_queries, save_queries

    folder = CACHE / "synthetic" / corpus.replace(" ", "_")
    before = llm.seconds
    n = synth_n()
    start = time.perf_counter()
    queries, report = generate_queries(split.kb, llm, n=n, seed=seed, progress=True)
    seconds = time.perf_counter() - start
    save_queries(folder / f"synthetic-seed{seed}-n{n}.jsonl", queries)
    split.synthetic = [q.query for q in queries]
    return {
        "seconds": seconds,
        "llm_seconds": llm.seconds - before,
        "n": len(split.synthetic),
        "requested": report.requested,
    }


def zoo_part(out: Path = OUT, save: Callable[[dict], None] | None = None) -> dict:
    """Every seeded split of every corpus, every choice; ``save`` gets the results after
    each corpus (so a long run keeps what it measured)."""
    seeds = list(range(int_value("BENCH_ZOO_SEEDS", "3", 1, "3")))
    corpora = _corpora()
    choices = list(SYNTH_CHOICES if synth_enabled() else CHOICES)
    cache = out / "zoo"
    embedder = near.CachedEmbedder(load_dense_embedder(SPEC), cache / "query-cache")
    llm = timed_local_llm() if synth_enabled() else None
    results: dict = {
        "embedder": SPEC,
        "granularity": GRANULARITY,
        "alpha": ALPHA,
        "seeds": seeds,
        "choices": choices,
        "synthetic": synth_enabled(),
        "synthetic_n": synth_n() if synth_enabled() else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "rows": {},
        "auto_picks": {},
        "sizes": {},
        "skipped": {},
        "build_s": {},
        "seconds": {},
        "synthetic_generation": {},
    }
    kbs: dict[str, KnowledgeBase] = {}
    began = time.perf_counter()
    for corpus in corpora:
        reason = missing_reason(corpus)
        if reason:
            results["skipped"][corpus] = reason
            print(f"skipping {corpus}: {reason}")
            continue
        start = time.perf_counter()
        name = KB_OF[corpus]
        if name not in kbs:
            kbs[name], results["build_s"][name] = knowledge_base(name, cache, out, embedder)
        far = datasets.truthfulqa_questions()
        for seed in seeds:
            split = SPLITS[corpus](kbs[name], seed)
            split.far = split.far or far
            if llm is not None:
                generation = add_synthetic(split, corpus, seed, llm)
                results["synthetic_generation"].setdefault(corpus, []).append(generation)
            new = split_rows(split, seed, choices)
            collect(results["rows"], corpus, new)
            if "picked" in new.get(AUTO, {}):
                results["auto_picks"].setdefault(corpus, []).append(new[AUTO]["picked"])
            results["sizes"][corpus] = split.sizes()
            print(f"{corpus} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
        results["seconds"][corpus] = time.perf_counter() - start
        results["total_s"] = time.perf_counter() - began
        if save is not None:
            save(results)
    return results


# ----------------------------------------------------------------------------- markdown
def _spread(values: Sequence[float] | None) -> str:
    if not values:
        return ""
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def _loss(loss: float, sd: float) -> str:
    return f"{loss:+.3f} ± {sd:.3f}"


def corpus_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per corpus x choice: the measures (mean ± sd over seeds) and the loss."""
    header = [
        "corpus",
        "choice",
        "AUROC (in vs near)",
        f"near flagged at {ALPHA}",
        f"held-out FPR at {ALPHA}",
        f"{FAR} AUROC",
        f"{FAR} flagged",
        "loss against the default (AUROC)",
    ]
    table = []
    for corpus, choices in results["rows"].items():
        default = choices.get(DEFAULT, {}).get("auroc")
        for choice in results["choices"]:
            found = choices.get(choice, {})
            if "auroc" not in found:
                errors = found.get("error", ["not run"])
                table.append([corpus, choice, f"refused: {errors[0]}", *[""] * 5])
                continue
            loss = ""
            if choice != DEFAULT and default and len(default) == len(found["auroc"]):
                loss = _loss(*paired_loss(default, found["auroc"]))
            cells = [_spread(found.get(metric)) for metric in METRICS]
            table.append([corpus, choice, *cells, loss])
    return header, table


def summary_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per choice: means over corpora, the worst corpus, the worst loss."""
    header = [
        "choice",
        "mean AUROC (in vs near)",
        f"mean near flagged at {ALPHA}",
        f"mean held-out FPR at {ALPHA}",
        f"mean {FAR} AUROC",
        "worst corpus (its AUROC)",
        "worst loss against the default (corpus)",
    ]
    rows = {c: found for c, found in results["rows"].items() if c not in VARIANTS}
    table = []
    for choice in results["choices"]:
        means = {}
        for metric in ("auroc", "flagged", "fpr", "far_auroc"):
            values = [
                np.mean(c[choice][metric]) for c in rows.values() if metric in c.get(choice, {})
            ]
            means[metric] = f"{np.mean(values):.3f}" if values else ""
        aurocs = {
            corpus: float(np.mean(c[choice]["auroc"]))
            for corpus, c in rows.items()
            if "auroc" in c.get(choice, {})
        }
        worst_corpus = min(aurocs, key=aurocs.get) if aurocs else None
        worst = worst_loss(rows, choice) if choice != DEFAULT else None
        table.append(
            [
                choice,
                *means.values(),
                f"{worst_corpus} ({aurocs[worst_corpus]:.3f})" if worst_corpus else "",
                "" if worst is None else f"{_loss(worst['loss'], worst['sd'])} ({worst['corpus']})",
            ]
        )
    return header, table


def apart_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """CLAP NQ's unanswerable questions per choice (flagged; AUROC against in-knowledge)."""
    sets = (UNANSWERABLE_IN, UNANSWERABLE_OUT)
    header = ["choice"] + [f"{s}: {m}" for s in sets for m in (f"flagged at {ALPHA}", "AUROC")]
    found = results["rows"].get("CLAP NQ", {})
    table = []
    for choice in results["choices"]:
        cells = [
            _spread(found.get(choice, {}).get(f"{s}: {m}"))
            for s in sets
            for m in ("flagged", "auroc")
        ]
        table.append([choice, *cells])
    return header, table


def sizes_table(results: dict) -> tuple[list[str], list[list[str]]]:
    names = ["documents", "chunks", "calibration", "in-knowledge test", "near", "far"]
    header = ["corpus", *names, "index build s", "run s (all seeds; a build included)"]
    table = []
    shown: set[str] = set()
    for corpus, sizes in results["sizes"].items():
        name = KB_OF[corpus]
        build = results["build_s"].get(name) or {}
        if name in shown:
            cell = f"{name}'s index"
        elif build.get("seconds") is None:
            cell = "cached"
        else:
            cell = f"{build['seconds']:.0f}" + (
                " (cached: not in this run)" if build["cached"] else ""
            )
        shown.add(name)
        table.append(
            [
                corpus,
                *(f"{sizes.get(n, 0):,}" for n in names),
                cell,
                f"{results['seconds'].get(corpus, 0):.0f}",
            ]
        )
    return header, table


SYNTH_NOTE = (
    "Synthetic calibration (the bundled local LLM's questions, alone or with 20, 50, 100 or "
    "all real ones) is its own run and section, zoo-synth (`BENCH_ZOO_SYNTH=1`)."
)


def ordered(results: dict) -> dict:
    """``results`` as read back from bench_out/zoo.json (keys sorted) in the zoo's order."""
    by_corpus = ("rows", "sizes", "seconds", "auto_picks", "synthetic_generation", "skipped")
    return results | {
        key: {c: results[key][c] for c in CORPORA if c in results.get(key, {})} for key in by_corpus
    }


def zoo_markdown(results: dict) -> list[str]:
    if not results.get("rows"):
        return []
    n = len(results["seeds"])
    synth = SYNTH_NOTE
    skipped = "".join(f" Skipped {c}: {r}." for c, r in results["skipped"].items())
    header, rows = corpus_table(results)
    s_header, s_rows = summary_table(results)
    a_header, a_rows = apart_table(results)
    z_header, z_rows = sizes_table(results)
    lines = [
        f"MiniLM; knowledge bases indexed as `ragbound index` does by default (200-word chunks, "
        f"40 overlap, chunk units); mean ± sd over {n} seeds (seeded splits and samples; "
        "combined and auto also learn with that seed). Each choice is calibrated by "
        "`Guard.calibrate` on the split's calibration questions and checked with "
        f"`ragbound decide`'s conformal p-values (flagged when p <= {ALPHA}). "
        "default = `Guard.calibrate` with no options (MSS, k = 32); a statistic row = "
        "`statistic=NAME` at the default k; combined / auto = `statistic=NAME, seed=SEED`. "
        "Near out-of-knowledge: PubMedQA: MMLU-Med; PubMedQA-half / COVID-QA halves: "
        "questions about the documents left out (benchmarks/near.py's splits); BANKING77-OOS: "
        f"{BANKING_N:,} in-domain out-of-scope test queries against {BANKING_N:,} in-scope "
        f"test queries, {BANKING_N:,} validation queries calibrate, the training queries "
        "(5,903 not blank) indexed, each record its own document (the variant with the "
        f'intent as the document id is its own corpus, "{BY_INTENT}": '
        "built with `KnowledgeBase.from_documents`, which takes repeated ids as given, "
        "while `ragbound index --id-field` refuses them and there is no group field yet; "
        "leave-documents-out then leaves a whole intent out; a variant of the same "
        "questions, it is not in the summary); CLAP NQ: answerable questions on the titles "
        "left out. "
        f"{FAR} (817) is the far set beside every corpus. loss against the default = the "
        "default's AUROC minus the choice's, paired by seed (positive: the choice loses). "
        + synth
        + skipped,
        "",
        "auto picked: " + near._picks(results["auto_picks"]) + ".",
        "",
        "**Summary per choice** (mean over corpora; worst corpus by AUROC; the largest loss "
        "against the default over corpora; " + ", ".join(VARIANTS) + " left out)",
        "",
        *markdown_table(s_header, s_rows),
        "",
        "**Per corpus**",
        "",
        *markdown_table(header, rows),
    ]
    if "CLAP NQ" in results["rows"]:
        lines += [
            "",
            "**CLAP NQ's unanswerable questions, apart** (a passage on the question's topic "
            "that lacks the answer; on an indexed title they are in scope, and a relevance "
            "test should mostly pass them; AUROC against the in-knowledge test)",
            "",
            *markdown_table(a_header, a_rows),
        ]
    lines += [
        "",
        "**Sizes and run time** (last seed's split; the whole run took "
        f"{results.get('total_s', 0.0) / 60:.1f} min, query embeddings and knowledge bases "
        "cached under bench_out/zoo/ for reruns; OMP_NUM_THREADS="
        f"{results.get('omp_num_threads', 'unset')})",
        "",
        *markdown_table(z_header, z_rows),
    ]
    return lines


def _value(values: Sequence[float] | None) -> str:
    """Mean (± sd when over more than one seed)."""
    if not values:
        return ""
    return f"{np.mean(values):.3f}" + (f" ± {np.std(values):.3f}" if len(values) > 1 else "")


def synth_questions(results: dict, corpus: str, choice: str) -> str:
    """How many questions ``choice`` calibrated on (synthetic + real), last seed."""
    synthetic, real = SYNTH_MIXES.get(choice, (False, None))
    n_real = results["sizes"][corpus]["calibration"]
    n_real = n_real if real is None else min(real, n_real)
    n_synth = results["synthetic_generation"][corpus][-1]["n"] if synthetic else 0
    return " + ".join(f"{n:,}" for n in (n_synth, n_real) if n) or "0"


def fpr_spread(n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Mean and sd of the held-out FPR of one draw of ``n`` exchangeable calibration questions:
    Beta(n + 1 - k, k), k = ceil((n + 1)(1 - alpha)) (conformal conditional coverage)."""
    k = math.ceil((n + 1) * (1 - alpha))
    a, b = n + 1 - k, k
    return a / (a + b), math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))


def synth_corpus_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per corpus x choice: FPR, its difference to the default's, near flagged, AUROC."""
    header = [
        "corpus",
        "choice",
        "calibration questions (synthetic + real)",
        f"held-out FPR at {ALPHA}",
        "FPR minus the default's",
        f"near flagged at {ALPHA}",
        "AUROC (in vs near)",
    ]
    table = []
    for corpus, choices in results["rows"].items():
        default = choices.get(DEFAULT, {}).get("fpr")
        for choice in results["choices"]:
            found = choices.get(choice, {})
            if "fpr" not in found:
                table.append([corpus, choice, f"refused: {found.get('error', ['not run'])[0]}"])
                table[-1] += [""] * 4
                continue
            diff = ""
            if choice != DEFAULT and default and len(default) == len(found["fpr"]):
                diff = f"{np.mean(np.subtract(found['fpr'], default)):+.3f}"
            cells = [_value(found.get(m)) for m in ("fpr", "flagged", "auroc")]
            n = synth_questions(results, corpus, choice)
            table.append([corpus, choice, n, cells[0], diff, *cells[1:]])
    return header, table


def worst_fpr(rows: dict[str, dict], choice: str) -> tuple[float, str] | None:
    """The highest held-out FPR (mean over seeds) of ``choice`` over corpora, and where."""
    fprs = {
        c: float(np.mean(found[choice]["fpr"]))
        for c, found in rows.items()
        if "fpr" in found.get(choice, {})
    }
    return None if not fprs else max((v, c) for c, v in fprs.items())


def real_needed(rows: dict[str, dict], synthetic: bool) -> str:
    """Which real-question counts (of REAL_COUNTS, then all), with the synthetic questions or
    without, bring the FPR to at most ALPHA + FPR_SLACK on every corpus, and which do not."""
    within, beyond = [], []
    for choice, (with_synth, real) in SYNTH_MIXES.items():
        if with_synth == synthetic and real != 0 and (worst := worst_fpr(rows, choice)):
            (within if worst[0] <= ALPHA + FPR_SLACK else beyond).append(str(real or "all"))
    return f"{', '.join(within) or 'none'}" + (f" (not {', '.join(beyond)})" if beyond else "")


def synth_summary_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per choice: mean and worst FPR over corpora, corpora within the slack."""
    header = [
        "choice",
        f"mean held-out FPR at {ALPHA}",
        "worst corpus FPR (corpus)",
        f"corpora with FPR <= {ALPHA + FPR_SLACK:.2f}",
        f"mean near flagged at {ALPHA}",
        "mean AUROC (in vs near)",
    ]
    rows = {c: found for c, found in results["rows"].items() if c not in VARIANTS}
    table = []
    for choice in results["choices"]:
        found = [c[choice] for c in rows.values() if "fpr" in c.get(choice, {})]
        fprs = [float(np.mean(f["fpr"])) for f in found]
        worst = worst_fpr(rows, choice)
        within = sum(v <= ALPHA + FPR_SLACK for v in fprs)
        means = [
            f"{np.mean([np.mean(f[m]) for f in found]):.3f}" if found else ""
            for m in ("fpr", "flagged", "auroc")
        ]
        table.append(
            [
                choice,
                means[0],
                "" if worst is None else f"{worst[0]:.3f} ({worst[1]})",
                f"{within} of {len(fprs)}",
                *means[1:],
            ]
        )
    return header, table


def generation_table(results: dict) -> tuple[list[str], list[list[str]]]:
    header = [
        "corpus",
        "synthetic questions kept (LLM calls)",
        "LLM min (its calls' own time)",
        "this run's generation s (cached replies: ~0)",
    ]
    table = [
        [
            corpus,
            " / ".join(f"{g['n']} ({g['requested']})" for g in found),
            f"{sum(g['llm_seconds'] for g in found) / 60:.1f}",
            f"{sum(g['seconds'] for g in found):.0f}",
        ]
        for corpus, found in results["synthetic_generation"].items()
    ]
    return header, table


def synth_markdown(results: dict) -> list[str]:
    """The ``zoo-synth`` section: what synthetic-only calibration gives per corpus and what
    20, 50, 100 or all real questions add (or give alone)."""
    if not results.get("rows"):
        return []
    ran = list(results["rows"])
    not_run = [c for c in CORPORA if c not in ran and c not in results["skipped"]]
    rows = {c: found for c, found in results["rows"].items() if c not in VARIANTS}
    worst = worst_fpr(rows, SYNTH_ONLY)
    slack = ALPHA + FPR_SLACK
    header, table = synth_corpus_table(results)
    s_header, s_table = synth_summary_table(results)
    g_header, g_table = generation_table(results)
    lines = [
        f"The corpus zoo's splits (see the zoo section) at {len(results['seeds'])} seed(s) "
        f"({', '.join(map(str, results['seeds']))}); corpora run: {', '.join(ran)}"
        + (f"; not run: {', '.join(not_run)}" if not_run else "")
        + "".join(f"; skipped {c}: {r}" for c, r in results["skipped"].items())
        + f". Every row is MSS at the default (`Guard.calibrate(kb, questions)`), checked "
        f"with `ragbound decide`'s conformal p-values at alpha = {ALPHA} on the held-out real "
        "in-knowledge questions (FPR) and the near out-of-knowledge ones (flagged, AUROC). "
        f"Synthetic: {results['synthetic_n']} questions a split (BENCH_ZOO_SYNTH_N; the "
        "default is 100) asked of the bundled local LLM (`ragbound synth`'s defaults, "
        "generation time below); n real: the first n of one seeded order of the split's "
        "real calibration questions (20 within 50 within 100), added to the synthetic ones or "
        "alone; default and synthetic + real: all of them. FPR minus the default's: against the "
        "default calibrated on all real calibration questions (paired by seed). The MSS score "
        "does not depend on the calibration: AUROC is the default's on every row, only FPR "
        "and flagged move. One seed is one draw: with n exchangeable (real) calibration "
        "questions a draw's held-out FPR is Beta(n + 1 - k, k), k = ceil((n + 1)(1 - alpha)), "
        "mean ± sd "
        + ", ".join("{:.3f} ± {:.3f}".format(*fpr_spread(n)) + f" at n = {n}" for n in REAL_COUNTS)
        + ": a small real sample's FPR is far from alpha on its own.",
        "",
        f"**Summary** ({', '.join(VARIANTS)} left out): synthetic only, worst corpus FPR "
        + ("" if worst is None else f"{worst[0]:.3f} ({worst[1]})")
        + f"; real questions added to the synthetic ones that bring the FPR to at most "
        f"{slack:.2f} (alpha + {FPR_SLACK}) on every corpus: {real_needed(rows, True)}; real "
        f"questions alone that do: {real_needed(rows, False)} (one draw each: see the spread "
        "above).",
        "",
        *markdown_table(s_header, s_table),
        "",
        "**Per corpus**",
        "",
        *markdown_table(header, table),
        "",
        "**Writing the synthetic questions** (per corpus, one entry a seed; the LLM's time is "
        "its calls' own, a cached reply keeping its original call's; OMP_NUM_THREADS="
        f"{results.get('omp_num_threads', 'unset')}; the whole run took "
        f"{results.get('total_s', 0.0) / 60:.1f} min)",
        "",
        *markdown_table(g_header, g_table),
    ]
    return lines


TITLE = "Corpus zoo: every automatic choice against the default"


SYNTH_TITLE = "Corpus zoo: synthetic calibration, and what real questions add"


def raw_path(synthetic: bool, out: Path = OUT) -> Path:
    return out / ("zoo_synth.json" if synthetic else "zoo.json")


def save(results: dict, out: Path = OUT) -> None:
    write_json(raw_path(results["synthetic"], out), results)


def write(results: dict) -> Path | None:
    """The run's section (``zoo``, or ``zoo-synth`` for the synthetic run) if anything ran."""
    synthetic = results["synthetic"]
    lines = synth_markdown(results) if synthetic else zoo_markdown(results)
    if not lines:
        return None
    name, title = ("zoo-synth", SYNTH_TITLE) if synthetic else ("zoo", TITLE)
    return write_section(name, title, "\n".join(lines))


def keep(results: dict) -> None:
    """Save the raw numbers; the synthetic run (hours) also writes its section as it goes."""
    save(results)
    if results["synthetic"]:
        write(results)


def main(argv: Sequence[str] = ()) -> dict:
    """Run the zoo (``BENCH_ZOO_SYNTH=1``: the synthetic one), save its raw numbers and write
    its section; ``render``: write the section again from the saved raw numbers, measuring
    nothing."""
    path = raw_path(synth_enabled())
    if list(argv) == ["render"]:
        results = ordered(json.loads(path.read_text()))
    elif argv:
        raise SystemExit(f"benchmarks.zoo: unknown arguments {list(argv)}; give none or render")
    else:
        results = zoo_part(OUT, save=keep)
        save(results)
    written = write(results)
    if written:
        print(f"raw numbers: {path}; tables written to {written}")
    table = synth_summary_table if results["synthetic"] else summary_table
    header, rows = table(results) if results["rows"] else ([], [])
    print("\n".join(markdown_table(header, rows)) if rows else "nothing ran")
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
