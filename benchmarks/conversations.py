"""Conversations (issue 38): deciding a chat's last user turn, each reading against the last
message alone, on doc2dial.

Set-up, per seed (``BENCH_CONV_SEEDS``, default 3): the 273 doc2dial documents are grouped by
text (two ids share one) and 70% of the texts are indexed (MiniLM, chunked as ``ragbound
index`` does by default; the whole corpus is indexed once, cached under
bench_out/conversations/, and restricted to the kept documents per seed). The kept documents'
dialogues are split in half: one half calibrates, the other is the in-knowledge test; the
left-out documents' dialogues are out of knowledge, turn by turn. Each dialogue is decided at
every user turn, with the turns and the assistant's answers before it (OpenAI-style messages,
doc2dial's ``agent`` as ``assistant``). Spliced conversations: a test dialogue followed by a
left-out document's first question (a *switch*, to a near topic: doc2dial's four domains make
every left-out document a near one) or by a TruthfulQA question (a *far switch*); the same
switch questions are also decided opening a chat, so a switch's share caught is read against
its questions' (issue 46: at least 0.80 / 0.90 of it). A set kept aside from every choice of
``follow``'s rules: the bundled sample (:func:`sample_rows`), its out-of-knowledge questions
asked after two-turn in-knowledge chats and opening a chat.

Calibrations: *standalone*, the default statistic (MSS) via ``Guard.calibrate(kb, questions)``
on the first user question of each calibration dialogue (what users have); *conversation*,
every user turn of the calibration dialogues read with the row's reading
(:func:`ragbound.conversations.turns.read_texts`), which makes the null exchangeable with new
turns.

Rows (one per reading, :mod:`ragbound.conversations.reading`): ``last`` (today's single-message
gate), ``follow`` (the default), ``follow-mean`` (``follow``'s segments, the words-weighted
mean of the joined turns' vectors searched: no embedding past the turn's; standalone
calibration only, a calibration holds texts), ``recent``, and ``rewrite`` through the bundled
local LLM on the first seed's split only, on a seeded subset of ``BENCH_CONV_REWRITE_N`` later
turns per group (default 10; 0 skips; an LLM call took 15-95 s on 2 busy cores; replies cached
in ``~/.cache/ragbound/llm``), beside ``last`` and ``follow`` on the same subset. Every
decision goes through ``Gate.decide_many`` (the path users run): flagged = ``abstain`` at alpha
0.05, the score is ``Decision.test.score``. Latency: p50 of ``Gate.decide(messages)`` against
``Gate.decide(query)`` (the last turn as a string) on ``BENCH_CONV_LATENCY_N`` (default 300)
user turns of test dialogues replayed in order, one Gate per reading with its turn cache (so
earlier turns are embedded once, as in a chat), the calls interleaved per turn, after a
warm-up, with a plain (uncached) embedder.

``make bench-conversations`` or ``python -m benchmarks.run conversations`` (``conversations
render``: the section again from bench_out/conversations.json, measuring nothing). Query
embeddings are cached under bench_out/conversations/query-cache for the quality rows (not for
the latency); raw numbers go to bench_out/conversations.json, the tables to the
``conversations`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import datasets, near
from benchmarks.doc import markdown_table, write_section
from benchmarks.settings import int_value
from ragbound.artifacts import write_json
from ragbound.conversations.model import Conversation, conversation
from ragbound.conversations.reading import (
    ANSWER_CHARS,
    FOLLOW,
    FOLLOW_MEAN,
    LAST,
    LOOKBACK,
    RECENT,
    REWRITE,
    follow_read,
    generic_turns,
    opening,
    recent_text,
    small_talk_turns,
)
from ragbound.conversations.turns import read_texts
from ragbound.corpus import Document, load_documents, load_queries
from ragbound.corpus.queries import split_queries
from ragbound.demo import sample_corpus
from ragbound.detect import Guard
from ragbound.embedders import load_dense_embedder
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import LLMError
from ragbound.stats import auroc

OUT = datasets.REPO / "bench_out"
SPEC = "minilm"
GRANULARITY = "chunk"  # what ``ragbound index`` indexes by default
ALPHA = 0.05
KEPT_SHARE = 0.7
QUESTION_WORDS = 4  # a later turn of more than this many words is "question-like"
BATCH = 256  # decisions per Gate.decide_many call
EXAMPLES = 12  # rewrites kept in the raw numbers, to read
TITLE = "Conversations: each reading of a chat against the last message alone (doc2dial)"

# groups of decided turns
IK_FIRST = "in-knowledge first turns"
IK_LATER = "in-knowledge later turns"
OUT_FIRST = "left-out first turns"
OUT_LATER = "left-out later turns"
SWITCH = "switch turns"
FAR = "far switch turns"
SWITCH_OPEN = "switch questions opening a chat"
FAR_OPEN = "far switch questions opening a chat"
GROUPS = (IK_FIRST, IK_LATER, OUT_FIRST, OUT_LATER, SWITCH, FAR, SWITCH_OPEN, FAR_OPEN)
LATER = (IK_LATER, OUT_LATER, SWITCH, FAR)  # the groups whose turns a rewrite costs a call

# measures of one row on one seed (flagged shares at ALPHA, AUROCs)
IK_LATER_Q = "in-knowledge later, question-like"
SWITCH_RATIO = "switch / opening"
FAR_RATIO = "far switch / opening"
OUT_TURNS = "left-out turns"
AUROC_TURNS = "auroc"
AUROC_FIRST = "auroc_first"
# column label, measure, higher is better (which seed is the worst)
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("in-knowledge first", IK_FIRST, False),
    ("in-knowledge later", IK_LATER, False),
    (f"in-knowledge later, > {QUESTION_WORDS} words", IK_LATER_Q, False),
    ("left-out first", OUT_FIRST, True),
    ("left-out later", OUT_LATER, True),
    ("left-out, all turns", OUT_TURNS, True),
    ("switch", SWITCH, True),
    ("far switch (TruthfulQA)", FAR, True),
    ("the switch questions opening a chat", SWITCH_OPEN, True),
    ("the far switch questions opening a chat", FAR_OPEN, True),
    ("switch / opening", SWITCH_RATIO, True),
    ("far switch / opening", FAR_RATIO, True),
    ("AUROC, all turns", AUROC_TURNS, True),
    ("AUROC, first questions", AUROC_FIRST, True),
)

STANDALONE = "standalone"
CONVERSATION = "conversation"
READINGS = (LAST, FOLLOW, FOLLOW_MEAN, RECENT)  # no LLM: every turn, the latency
ROW_NAMES = {
    LAST: "last message alone (baseline)",
    FOLLOW: "follow (default)",
    FOLLOW_MEAN: "follow-mean (follow's turns, the mean of their vectors searched)",
    RECENT: "recent (last 3 user turns)",
    REWRITE: "rewrite (bundled 1.5B LLM), subset",
}
SUBSET_ROWS = {LAST: "last message alone, rewrite's subset", FOLLOW: "follow, rewrite's subset"}

# targets (issue 38): the in-knowledge bound, the power slacks; issue 46: the latency ratio,
# a switch caught nearly as often as its question opening a chat (0.80 against 0.90), and
# doc2dial's spliced switches flagged at least as often as by follow before issue 46 (the
# 2026-12-04 run: 0.039 near, 0.909 far)
IK_BOUND = 0.07
FLAGGED_SLACK = 0.03
AUROC_SLACK = 0.02
LATENCY_BOUND = 1.6
SWITCH_SHARE = 0.80 / 0.90
SWITCH_BEFORE = 0.039
FAR_BEFORE = 0.909
SAMPLE = "sample (kept aside)"


# ------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dialogue:
    """One doc2dial dialogue: its document's id and its turns as OpenAI-style messages."""

    id: str
    document: str
    messages: tuple[dict[str, str], ...]

    def turns(self) -> list[Conversation]:
        """The dialogue as it stood at each user turn (the messages after it left out)."""
        last = max(i for i, m in enumerate(self.messages) if m["role"] == "user")
        return conversation(list(self.messages[: last + 1]), id=self.id).turns()

    def then(self, question: str) -> Conversation:
        """The whole dialogue followed by one more user turn, ``question``."""
        asked = {"role": "user", "content": question}
        return conversation([*self.messages, asked], id=self.id)


@dataclass(frozen=True)
class Corpus:
    """doc2dial's documents and dialogues, and the far questions spliced after dialogues."""

    documents: tuple[Document, ...]
    dialogues: tuple[Dialogue, ...]
    far: tuple[str, ...]

    def text_groups(self) -> dict[str, list[str]]:
        """Document ids grouped by their text (sha256), in sorted order of the texts' keys."""
        groups: dict[str, list[str]] = {}
        for doc in self.documents:
            groups.setdefault(hashlib.sha256(doc.text.encode()).hexdigest(), []).append(doc.id)
        return {key: groups[key] for key in sorted(groups)}

    def fingerprint(self) -> str:
        """sha256 (12 hex characters) of the documents' ids and texts: the index's cache key."""
        digest = hashlib.sha256()
        for doc in self.documents:
            digest.update(f"{doc.id}\x1f{doc.text}\x1e".encode())
        return digest.hexdigest()[:12]


def doc2dial_folder() -> Path:
    return datasets.data_root() / "doc2dial"


def missing_reason() -> str | None:
    """Why the benchmark cannot run here (doc2dial or TruthfulQA absent), or None."""
    folder = doc2dial_folder()
    needed = [folder / "documents.jsonl", folder / "dialogues.jsonl"]
    needed.append(datasets.data_root() / "truthfulqa" / "data" / "v1" / "TruthfulQA.csv")
    absent = [str(p) for p in needed if not p.is_file()]
    return f"data sets not found: {', '.join(absent)}" if absent else None


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load_corpus() -> Corpus:
    """doc2dial (273 documents, 661 dialogues) and the 817 TruthfulQA questions."""
    folder = doc2dial_folder()
    documents = tuple(
        Document(id=d["id"], text=d["text"], source=f"doc2dial/{d['domain']}")
        for d in _jsonl(folder / "documents.jsonl")
    )
    roles = {"user": "user", "agent": "assistant"}
    dialogues = tuple(
        Dialogue(
            d["id"],
            d["document"],
            tuple({"role": roles[t["role"]], "content": t["text"]} for t in d["turns"]),
        )
        for d in _jsonl(folder / "dialogues.jsonl")
    )
    far = tuple(q.strip() for q in datasets.truthfulqa_questions())  # as a message reads it
    return Corpus(documents, dialogues, far)


def subset(corpus: Corpus, n_texts: int) -> Corpus:
    """The first ``n_texts`` document texts (in :meth:`Corpus.text_groups` order), their
    documents and dialogues: a small corpus for a quick run."""
    ids = {i for group in list(corpus.text_groups().values())[:n_texts] for i in group}
    return Corpus(
        tuple(d for d in corpus.documents if d.id in ids),
        tuple(d for d in corpus.dialogues if d.document in ids),
        corpus.far,
    )


def cached_kb(corpus: Corpus, cache: Path, embedder: near.CachedEmbedder) -> KnowledgeBase:
    """The whole corpus indexed as ``ragbound index`` does by default (cached by content)."""
    folder = cache / f"kb-doc2dial-{corpus.fingerprint()}"
    kb, _ = near.cached_kb(folder, lambda: list(corpus.documents), embedder, SPEC, GRANULARITY)
    return kb


# ------------------------------------------------------------------------------ splits
@dataclass
class Split:
    """One seeded split: the kept documents' knowledge base, the calibration dialogues and
    the decided turns of each group (:data:`GROUPS`)."""

    kept: set[str]
    kb: KnowledgeBase
    calibration: list[Dialogue]
    test: list[Dialogue]
    groups: dict[str, list[Conversation]]

    def first_questions(self) -> list[str]:
        """The calibration dialogues' first user questions: the standalone calibration."""
        return [d.turns()[0].last_user for d in self.calibration]

    def calibration_turns(self) -> list[Conversation]:
        """Every user turn of the calibration dialogues: the conversation calibration."""
        return [turn for d in self.calibration for turn in d.turns()]

    def sizes(self) -> dict[str, int]:
        return {
            "documents kept": len(self.kept),
            "chunks": len(self.kb.chunks),
            "calibration dialogues": len(self.calibration),
            "test dialogues": len(self.test),
            **{name: len(items) for name, items in self.groups.items()},
        }


def make_split(corpus: Corpus, kb: KnowledgeBase, seed: int) -> Split:
    """KEPT_SHARE of the texts indexed; the kept documents' dialogues halved (calibration,
    test), the others' left out; each test dialogue spliced with a random left-out
    dialogue's first question and with a random far question."""
    rng = np.random.default_rng(seed)
    groups = list(corpus.text_groups().values())
    order = rng.permutation(len(groups))
    kept = {i for g in order[: round(KEPT_SHARE * len(groups))] for i in groups[g]}
    inside = [d for d in corpus.dialogues if d.document in kept]
    outside = [d for d in corpus.dialogues if d.document not in kept]
    shuffled = [inside[i] for i in rng.permutation(len(inside))]
    calibration, test = shuffled[: len(shuffled) // 2], shuffled[len(shuffled) // 2 :]
    found: dict[str, list[Conversation]] = {name: [] for name in GROUPS}
    for dialogue in test:
        turns = dialogue.turns()
        found[IK_FIRST].append(turns[0])
        found[IK_LATER] += turns[1:]
        switch_to = outside[rng.integers(len(outside))].turns()[0].last_user
        far = corpus.far[rng.integers(len(corpus.far))]
        found[SWITCH].append(dialogue.then(switch_to))
        found[FAR].append(dialogue.then(far))
        # the same questions opening a chat: how often a switch is caught against them
        found[SWITCH_OPEN].append(conversation([{"role": "user", "content": switch_to}]))
        found[FAR_OPEN].append(conversation([{"role": "user", "content": far}]))
    for dialogue in outside:
        turns = dialogue.turns()
        found[OUT_FIRST].append(turns[0])
        found[OUT_LATER] += turns[1:]
    return Split(kept, kb.restricted_to(kept), calibration, test, found)


def sampled(split: Split, n: int, seed: int) -> dict[str, list[Conversation]]:
    """The rewrite's subset: every first turn (read as itself, no LLM call) and a seeded
    sample of ``n`` turns of each later group, in their order."""
    rng = np.random.default_rng(seed + 1000)
    found = {}
    for name, items in split.groups.items():
        if name in LATER:
            picked = sorted(rng.permutation(len(items))[: min(n, len(items))])
            items = [items[i] for i in picked]
        found[name] = list(items)
    return found


# ------------------------------------------------------------------------------ scoring
@dataclass(frozen=True)
class Outcome:
    """One group's decisions: each turn's score (higher = more out of knowledge) and whether
    it was flagged (``abstain``)."""

    scores: np.ndarray
    flagged: np.ndarray


def decide(gate: Gate, items: Sequence[Conversation]) -> Outcome:
    """``gate.decide_many`` over ``items`` in batches of :data:`BATCH`."""
    decisions = [
        d for i in range(0, len(items), BATCH) for d in gate.decide_many(items[i : i + BATCH])
    ]
    return Outcome(
        np.array([d.test.score for d in decisions], dtype=float),
        np.array([d.action == "abstain" for d in decisions], dtype=bool),
    )


def question_like(items: Iterable[Conversation]) -> np.ndarray:
    """Whether each turn has more than :data:`QUESTION_WORDS` words."""
    return np.array([len(c.last_user.split()) > QUESTION_WORDS for c in items], dtype=bool)


def measures(found: dict[str, Outcome], wordy: np.ndarray) -> dict[str, float]:
    """Each group's share flagged, the question-like later turns', every left-out turn's,
    and AUROC in-knowledge against left-out turns: all turns, and first turns only."""
    row = {name: float(np.mean(o.flagged)) for name, o in found.items()}
    if wordy.any():
        row[IK_LATER_Q] = float(np.mean(found[IK_LATER].flagged[wordy]))
    out = [found[OUT_FIRST], found[OUT_LATER]]
    row[OUT_TURNS] = float(np.mean(np.concatenate([o.flagged for o in out])))
    inside = np.concatenate([found[IK_FIRST].scores, found[IK_LATER].scores])
    row[AUROC_TURNS] = auroc(inside, np.concatenate([o.scores for o in out]))
    row[AUROC_FIRST] = auroc(found[IK_FIRST].scores, found[OUT_FIRST].scores)
    add_ratio(row, SWITCH_RATIO, row[SWITCH], row[SWITCH_OPEN])
    add_ratio(row, FAR_RATIO, row[FAR], row[FAR_OPEN])
    return row


def add_ratio(row: dict[str, float], name: str, switch: float, opening: float) -> None:
    """``row[name]``: a switch's share caught over its questions' share caught opening a chat;
    left out when none of them was caught opening (no ratio to read)."""
    if opening > 0:
        row[name] = switch / opening


def row_of(gate: Gate, groups: dict[str, list[Conversation]]) -> dict[str, float]:
    found = {name: decide(gate, items) for name, items in groups.items()}
    return measures(found, question_like(groups[IK_LATER]))


def warm(embedder: near.CachedEmbedder, chats: Iterable[Conversation]) -> None:
    """Embed, in bulk, every text the readings will ask the turn cache for (the user turns
    and answers' openings a reading looks back on, the recent join, the content-free turns and
    small talk; then the joins ``follow`` makes, found by reading every chat with those
    vectors), so the decisions find them cached (one at a time, each new text rewrites the
    cache files)."""
    chats = list(chats)
    texts = [*generic_turns(), *small_talk_turns()]
    for chat in chats:
        back = LOOKBACK + 1
        texts += chat.user_turns[-back:]
        texts += [opening(a, ANSWER_CHARS) for a in chat.user_answers[-back:] if a]
        texts.append(recent_text(chat)[0])
    known = set(texts)
    embedder.encode(list(dict.fromkeys(texts)))
    joins: list[str] = []

    def recorded(batch: list[str]) -> np.ndarray:
        # follow decides from the turns and answers (known); the texts it reads are recorded
        rows = np.zeros((len(batch), embedder.encode([texts[0]]).shape[1]), np.float32)
        found = [i for i, text in enumerate(batch) if text in known]
        joins.extend(text for text in batch if text not in known)
        if found:
            rows[found] = embedder.encode([batch[i] for i in found])
        return rows

    for chat in chats:
        if chat.turn_index > 0:
            joins.append(follow_read(chat, recorded).text)
    if joins:
        embedder.encode(list(dict.fromkeys(joins)))


def split_rows(split: Split, standalone: Guard) -> dict[str, dict[str, dict[str, float]]]:
    """Reading -> calibration -> measures, for the readings without an LLM; ``standalone``
    is the split's standalone calibration."""
    turns = split.calibration_turns()
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for reading in READINGS:
        rows[ROW_NAMES[reading]] = {
            STANDALONE: row_of(Gate(standalone, reading=reading), split.groups)
        }
        if reading == FOLLOW_MEAN:  # a calibration holds texts: follow-mean searches no text
            continue
        by_turns = Guard.calibrate(split.kb, read_texts(split.kb, turns, reading))
        rows[ROW_NAMES[reading]][CONVERSATION] = row_of(
            Gate(by_turns, reading=reading), split.groups
        )
    return rows


# --------------------------------------------------------- kept aside: the bundled sample
SAMPLE_IK = "in-knowledge second turns"
SAMPLE_SWITCH = "switches (after two in-knowledge turns)"
SAMPLE_OPEN = "the same questions opening a chat"
SAMPLE_MEASURES = (SAMPLE_IK, SAMPLE_SWITCH, SAMPLE_OPEN)
SAMPLE_ANSWER_CHARS = 300  # the assistant's answer: the opening of the nearest chunk


def sample_kb(cache: Path, embedder: near.CachedEmbedder) -> KnowledgeBase:
    """The bundled sample's docs indexed as ``ragbound index`` does by default (cached)."""
    root = sample_corpus()
    folder = cache / "kb-sample"
    kb, _ = near.cached_kb(
        folder, lambda: load_documents([root / "docs"]), embedder, SPEC, GRANULARITY
    )
    return kb


def sample_rows(kb: KnowledgeBase, seed: int) -> dict[str, dict[str, float]]:
    """A set kept aside from every choice of ``follow`` (not doc2dial, and not looked at
    while choosing): the bundled sample's in-knowledge questions halved (calibration, test),
    the test half paired into two-turn chats (the assistant answering with the opening of the
    nearest chunk), each out-of-knowledge question asked after one of them (a switch) and
    opening a chat alone. Reading -> measure -> share flagged (``abstain``)."""
    root = sample_corpus()
    calibration, test = split_queries(load_queries(root / "in_knowledge.txt"), 0.5, seed)
    outside = load_queries(root / "out_of_knowledge.txt")
    guard = Guard.calibrate(kb, calibration)
    nearest = Gate(guard, reading=LAST, context_k=1).decide_many(test)
    answers = [d.neighbours[0].text[:SAMPLE_ANSWER_CHARS] if d.neighbours else "" for d in nearest]
    pairs = [(2 * i, 2 * i + 1) for i in range(len(test) // 2)]

    def told(*turns: int) -> list[dict[str, str]]:
        said = [
            [{"role": "user", "content": test[i]}, {"role": "assistant", "content": answers[i]}]
            for i in turns
        ]
        return [m for pair in said for m in pair]

    groups = {
        SAMPLE_IK: [conversation([*told(a), told(b)[0]]) for a, b in pairs],
        SAMPLE_SWITCH: [
            conversation([*told(*pairs[j % len(pairs)]), {"role": "user", "content": q}])
            for j, q in enumerate(outside)
        ],
        SAMPLE_OPEN: [conversation([{"role": "user", "content": q}]) for q in outside],
    }
    return {
        ROW_NAMES[reading]: {
            name: float(np.mean(decide(Gate(guard, reading=reading), items).flagged))
            for name, items in groups.items()
        }
        for reading in READINGS
    }


def sample_part(kb: KnowledgeBase, seed: int) -> dict[str, dict[str, dict[str, float]]]:
    """One seed's sample rows, as :func:`collect` takes them (the kept-aside calibration
    key), with the switch ratio."""
    found = sample_rows(kb, seed)
    for row in found.values():
        add_ratio(row, SWITCH_RATIO, row[SAMPLE_SWITCH], row[SAMPLE_OPEN])
    return {row: {SAMPLE: measured} for row, measured in found.items()}


# ------------------------------------------------------------------------------ rewrite
class RewriteLLM:
    """The bundled local LLM, its replies cached, keeping each call's seconds (a cached reply
    keeps its original call's)."""

    def __init__(self):
        from benchmarks.local_llm import make_local_llm

        self.cached = make_local_llm()
        self.seconds: list[float] = []

    @property
    def model_id(self) -> str:
        return self.cached.model_id

    def complete(self, messages, params=None):
        response = self.cached.complete(messages, params)
        self.seconds.append(response.seconds)
        return response


def local_llm() -> tuple[RewriteLLM | None, str | None]:
    """The bundled LLM loaded, or None and why it could not be."""
    try:
        llm = RewriteLLM()
        llm.cached.llm.load()
    except (LLMError, OSError) as exc:
        return None, f"the bundled local LLM did not load: {type(exc).__name__}: {exc}"
    return llm, None


def rewrite_rows(
    split: Split, standalone: Guard, llm: RewriteLLM, n: int, seed: int
) -> dict[str, dict]:
    """The rewrite reading on the seed's subset (standalone calibration), and ``last`` and
    ``follow`` on the same turns; the LLM seconds of the calls the subset made."""
    from ragbound.conversations.rewrite import Rewriter

    groups = sampled(split, n, seed)
    rewriter = Rewriter(llm)
    chats = [c for name in LATER for c in groups[name]]
    before = len(llm.seconds)
    rewritten = rewriter.rewrite_many(chats)  # the gate below finds these replies cached
    seconds = llm.seconds[before:]
    split.kb.query_embedder().encode(list(dict.fromkeys(rewritten)))
    gate = Gate(standalone, reading=REWRITE, rewriter=rewriter)
    rows = {ROW_NAMES[REWRITE]: {STANDALONE: row_of(gate, groups)}}
    for reading, name in SUBSET_ROWS.items():
        rows[name] = {STANDALONE: row_of(Gate(standalone, reading=reading), groups)}
    rows[ROW_NAMES[REWRITE]]["llm_seconds"] = seconds
    rows[ROW_NAMES[REWRITE]]["examples"] = [
        {"turn": chat.last_user, "rewrite": text}
        for chat, text in list(zip(chats, rewritten, strict=True))[:EXAMPLES]
    ]
    return rows


# ------------------------------------------------------------------------------ latency
def messages(chat: Conversation) -> list[dict[str, str]]:
    """``chat`` as the OpenAI-style messages a caller sends (validated again when decided)."""
    return [{"role": m.role, "content": m.text} for m in chat.messages]


def latency(
    corpus: Corpus, kb_folder: Path, split: Split, n_turns: int
) -> dict[str, dict[str, float]]:
    """p50 of ``Gate.decide(messages)`` per reading against ``Gate.decide(query)``, on the
    first ``n_turns`` user turns of the test dialogues replayed in order (each reading's gate
    keeps its turn cache, as in a chat), every call interleaved per turn; a plain embedder
    (no query cache), the standalone calibration."""
    plain = KnowledgeBase.load(kb_folder, embedder=load_dense_embedder(SPEC))
    kb = plain.restricted_to(split.kept)
    guard = Guard.calibrate(kb, split.first_questions())
    gates = {reading: Gate(guard, reading=reading) for reading in READINGS}
    turns = [turn for d in split.test for turn in d.turns()][:n_turns]
    for warmup in [turn for d in split.calibration[:3] for turn in d.turns()]:
        for gate in gates.values():
            gate.decide(warmup)
            gate.decide(warmup.last_user)
    calls: list[tuple[str, Callable[[Conversation], object]]] = [
        ("query", lambda chat: gates[LAST].decide(chat.last_user)),
        *(
            (reading, lambda chat, g=gate: g.decide(messages(chat)))
            for reading, gate in gates.items()
        ),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in calls}
    for i, turn in enumerate(turns):  # the order of the calls rotates from turn to turn
        for name, call in calls[i % len(calls) :] + calls[: i % len(calls)]:
            start = time.perf_counter()
            call(turn)
            times[name].append((time.perf_counter() - start) * 1e3)
    later = np.array([turn.turn_index > 0 for turn in turns], dtype=bool)
    out: dict[str, dict[str, float]] = {}
    for name, ms in times.items():
        values = np.asarray(ms)
        out[name] = {
            "n": len(values),
            "p50_ms": float(np.median(values)),
            "later_n": int(later.sum()),
            "later_p50_ms": float(np.median(values[later])) if later.any() else float("nan"),
        }
    return out


# --------------------------------------------------------------------------------- part
def collect(rows: dict, new: dict[str, dict]) -> None:
    """Append one seed's measures to row -> calibration -> measure -> per-seed values."""
    for row, by_calibration in new.items():
        for calibration, found in by_calibration.items():
            if calibration in ("llm_seconds", "examples"):
                rows.setdefault(row, {}).setdefault(calibration, []).extend(found)
                continue
            target = rows.setdefault(row, {}).setdefault(calibration, {})
            for measure, value in found.items():
                target.setdefault(measure, []).append(value)


def conversations_part(
    out: Path = OUT,
    corpus: Corpus | None = None,
    save: Callable[[dict], None] | None = None,
) -> dict:
    """Every seed's rows, the rewrite subset and the latency; ``save`` gets the results after
    each seed (a long run keeps what it measured)."""
    seeds = list(range(int_value("BENCH_CONV_SEEDS", "3", 1, "3")))
    rewrite_n = int_value("BENCH_CONV_REWRITE_N", "10", 0, "60")
    latency_n = int_value("BENCH_CONV_LATENCY_N", "300", 0, "300")
    began = time.perf_counter()
    corpus = corpus or load_corpus()
    cache = out / "conversations"
    embedder = near.CachedEmbedder(load_dense_embedder(SPEC), cache / "query-cache")
    kb = cached_kb(corpus, cache, embedder)
    sample = sample_kb(cache, embedder)
    llm, llm_skipped = (None, "BENCH_CONV_REWRITE_N=0") if rewrite_n == 0 else local_llm()
    results: dict = {
        "embedder": SPEC,
        "granularity": GRANULARITY,
        "alpha": ALPHA,
        "seeds": seeds,
        "rewrite_n": rewrite_n,
        "rewrite_skipped": llm_skipped,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "corpus": {
            "documents": len(corpus.documents),
            "texts": len(corpus.text_groups()),
            "dialogues": len(corpus.dialogues),
            "far questions": len(corpus.far),
        },
        "rows": {},
        "sizes": {},
        "seconds": {},
    }
    for seed in seeds:
        start = time.perf_counter()
        split = make_split(corpus, kb, seed)
        warm(embedder, [*split.calibration_turns(), *(c for g in split.groups.values() for c in g)])
        standalone = Guard.calibrate(split.kb, split.first_questions())
        collect(results["rows"], split_rows(split, standalone))
        collect(results["rows"], sample_part(sample, seed))
        if seed == seeds[0] and llm is not None:  # minutes per call: the first seed only
            collect(results["rows"], rewrite_rows(split, standalone, llm, rewrite_n, seed))
        if seed == seeds[0] and latency_n:
            results["latency"] = latency(corpus, kb.path, split, latency_n)
        results["sizes"] = split.sizes()
        results["seconds"][str(seed)] = time.perf_counter() - start
        results["total_s"] = time.perf_counter() - began
        print(f"seed {seed}: {results['seconds'][str(seed)]:.0f} s", flush=True)
        if save is not None:
            save(results)
    return results


# ----------------------------------------------------------------------------- markdown
def _cell(values: Sequence[float] | None, higher_is_better: bool) -> str:
    """Mean over seeds, and the worst seed in brackets when there are several."""
    if not values:
        return ""
    worst = min(values) if higher_is_better else max(values)
    mean = f"{np.mean(values):.3f}"
    return mean if len(values) == 1 else f"{mean} ({worst:.3f})"


def _mean(results: dict, row: str, measure: str, calibration: str = STANDALONE) -> float | None:
    values = results["rows"].get(row, {}).get(calibration, {}).get(measure)
    return float(np.mean(values)) if values else None


def quality_table(results: dict, calibration: str) -> tuple[list[str], list[list[str]]]:
    """One row per reading (and the rewrite's subset rows) with ``calibration``: each
    measure's mean over seeds (worst seed)."""
    header = ["reading", *(label for label, _, _ in COLUMNS)]
    table = []
    for row, found in results["rows"].items():
        if calibration in found:
            cells = [_cell(found[calibration].get(m), better) for _, m, better in COLUMNS]
            table.append([row, *cells])
    if calibration == STANDALONE and results.get("rewrite_skipped"):
        skipped = f"skipped: {results['rewrite_skipped']}"
        table.append([ROW_NAMES[REWRITE], skipped, *[""] * (len(COLUMNS) - 1)])
    return header, table


def sample_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """The kept-aside set's rows: each reading's shares flagged, mean over seeds (worst)."""
    measures_of = [(m, m != SAMPLE_IK) for m in SAMPLE_MEASURES] + [(SWITCH_RATIO, True)]
    header = ["reading", *(m for m, _ in measures_of)]
    table = [
        [row, *(_cell(found[SAMPLE].get(m), better) for m, better in measures_of)]
        for row, found in results["rows"].items()
        if SAMPLE in found
    ]
    return header, table


def latency_ratio(results: dict, reading: str) -> float | None:
    """p50 of a conversation decision under ``reading`` over a query's, on later turns."""
    lat = results.get("latency") or {}
    if reading not in lat:
        return None
    return lat[reading]["later_p50_ms"] / lat["query"]["later_p50_ms"]


def latency_table(results: dict) -> tuple[list[str], list[list[str]]]:
    header = [
        "decision",
        "p50 ms, every turn",
        "x a query",
        "p50 ms, later turns",
        "x a query",
    ]
    lat = results["latency"]
    query = lat["query"]
    table = []
    for name, found in lat.items():
        label = (
            "`Gate.decide(query)`, the last turn as a string"
            if name == "query"
            else f"`Gate.decide(messages)`, {ROW_NAMES[name]}"
        )
        table.append(
            [
                label,
                f"{found['p50_ms']:.2f}",
                f"{found['p50_ms'] / query['p50_ms']:.2f}",
                f"{found['later_p50_ms']:.2f}",
                f"{found['later_p50_ms'] / query['later_p50_ms']:.2f}",
            ]
        )
    return header, table


def targets(results: dict) -> list[dict]:
    """Issue 38's targets, each with its bound and, per reading, the value (mean over seeds,
    standalone calibration) and whether it is met. Two bounds move with the baseline
    (``last``): its left-out first turns flagged and its AUROC on first questions."""
    base = ROW_NAMES[LAST]
    base_first = _mean(results, base, OUT_FIRST)
    base_auroc = _mean(results, base, AUROC_FIRST)
    if base_first is None or base_auroc is None:
        return []
    first = ("the baseline's left-out first turns flagged", base_first, FLAGGED_SLACK)
    auroc_first = ("the baseline's AUROC on first questions", base_auroc, AUROC_SLACK)
    found = [
        ("in-knowledge later turns flagged", IK_LATER, "<=", IK_BOUND, None, STANDALONE),
        ("in-knowledge first turns flagged", IK_FIRST, "<=", IK_BOUND, None, STANDALONE),
        ("left-out turns flagged (first and later)", OUT_TURNS, ">=", None, first, STANDALONE),
        ("switch turns flagged", SWITCH, ">=", None, first, STANDALONE),
        ("AUROC, in-knowledge vs left-out turns", AUROC_TURNS, ">=", None, auroc_first, STANDALONE),
        (
            "switch turns flagged, as often as follow before issue 46",
            SWITCH,
            ">=",
            SWITCH_BEFORE,
            None,
            STANDALONE,
        ),
        (
            "far switch turns flagged, as often as follow before issue 46",
            FAR,
            ">=",
            FAR_BEFORE,
            None,
            STANDALONE,
        ),
        (
            "far switches caught / the same questions opening a chat",
            FAR_RATIO,
            ">=",
            SWITCH_SHARE,
            None,
            STANDALONE,
        ),
        (
            "kept aside (sample): switches caught / the same questions opening a chat",
            SWITCH_RATIO,
            ">=",
            SWITCH_SHARE,
            None,
            SAMPLE,
        ),
    ]
    rows = [ROW_NAMES[r] for r in (*READINGS, REWRITE) if ROW_NAMES[r] in results["rows"]]
    out = []
    for label, measure, sense, fixed, moving, calibration in found:
        bound = fixed if moving is None else moving[1] - moving[2]
        values = {row: _mean(results, row, measure, calibration) for row in rows}
        out.append(
            {
                "target": label,
                "sense": sense,
                "bound": bound,
                "bound_from": moving,
                "values": {
                    row: (value, value <= bound if sense == "<=" else value >= bound)
                    for row, value in values.items()
                    if value is not None
                },
            }
        )
    if results.get("latency"):
        ratios = {ROW_NAMES[r]: latency_ratio(results, r) for r in READINGS}
        out.append(
            {
                "target": "p50 decision latency, conversation / query (later turns; issue 46)",
                "sense": "<=",
                "bound": LATENCY_BOUND,
                "bound_from": None,
                "values": {row: (v, v <= LATENCY_BOUND) for row, v in ratios.items() if v},
            }
        )
    return out


def targets_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """A row per target, a column per reading: the value and met / missed."""
    found = targets(results)
    rows = list(dict.fromkeys(row for t in found for row in t["values"]))
    header = ["target", "bound", *rows]
    table = []
    for t in found:
        bound = f"{t['sense']} {t['bound']:.3f}"
        if t["bound_from"] is not None:
            source, value, slack = t["bound_from"]
            bound += f" ({source}, {value:.3f}, minus {slack})"
        cells = []
        for row in rows:
            if row not in t["values"]:
                cells.append("n/a" + (" (an LLM call)" if row == ROW_NAMES[REWRITE] else ""))
                continue
            value, met = t["values"][row]
            cells.append(f"{value:.3f} {'met' if met else 'missed'}")
        table.append([t["target"], bound, *cells])
    return header, table


def rewrite_cost(results: dict) -> str:
    """The rewrite's LLM calls: how many and their p50 seconds (the model's own time)."""
    seconds = results["rows"].get(ROW_NAMES[REWRITE], {}).get("llm_seconds")
    if not seconds:
        return ""
    return (
        f" The rewrite's LLM call (one per later turn; {len(seconds)} calls) took "
        f"p50 {np.median(seconds):.1f} s of the model's own time (a cached reply keeps its "
        "original call's), on top of the decision."
    )


def conversations_markdown(results: dict) -> list[str]:
    if not results.get("rows"):
        return []
    seeds = results["seeds"]
    sizes = results["sizes"]
    corpus = results["corpus"]
    spread = " (worst seed)" if len(seeds) > 1 else ""
    plural = "seeds" if len(seeds) > 1 else "seed"
    lines = [
        f"doc2dial ({corpus['documents']} documents, {corpus['texts']} distinct texts, "
        f"{corpus['dialogues']} dialogues); MiniLM, indexed as `ragbound index` does by default "
        f"({GRANULARITY} units); MSS, alpha = {ALPHA}. {len(seeds)} {plural}: per seed "
        f"{KEPT_SHARE:.0%} of the texts indexed, the kept documents' dialogues halved "
        "(calibration, in-knowledge test), the left-out documents' dialogues out of knowledge, "
        "every user turn decided with the turns and answers before it. Switch: a test "
        "dialogue followed by a left-out document's first question; far switch: followed by "
        f"a TruthfulQA question. Question-like: more than {QUESTION_WORDS} words. Flagged = "
        "`Gate.decide_many` answered `abstain`; the AUROC reads `Decision.test.score`. "
        f"Each cell: mean over seeds{spread}; the worst seed is the highest share for the "
        "in-knowledge columns and the lowest for the others. Last seed's split: "
        + ", ".join(f"{n:,} {name}" for name, n in sizes.items())
        + f". The run took {results.get('total_s', 0.0) / 60:.1f} min (query embeddings "
        "cached under bench_out/conversations/ for reruns).",
        "",
        "**Calibrated on standalone questions** (the first user question of each calibration "
        "dialogue, `Guard.calibrate(kb, questions)`)"
        + (
            f"; the rewrite's subset (seed {seeds[0]} only: an LLM call a later turn): every "
            f"first turn and {results['rewrite_n']} sampled turns of each later group, with "
            "`last` and `follow` on the same turns"
            if results.get("rewrite_n")
            else ""
        ),
        "",
        *markdown_table(*quality_table(results, STANDALONE)),
        "",
        "**Calibrated on conversations** (every user turn of the calibration dialogues, "
        "read with the row's reading: `Guard.calibrate(kb, read_texts(kb, turns, reading))`; "
        "MSS's score does not depend on the calibration, so the AUROCs are the rows' above)",
        "",
        *markdown_table(*quality_table(results, CONVERSATION)),
    ]
    if any(SAMPLE in found for found in results["rows"].values()):
        lines += [
            "",
            "**Kept aside: the bundled sample** (not doc2dial, not looked at while choosing "
            "`follow`'s rules): per seed, its in-knowledge questions halved (the standalone "
            "calibration, the test), the test half paired into two-turn chats (the assistant "
            "answering with the opening of the nearest chunk); each of its 60 out-of-knowledge "
            "questions (30 far, 30 near) asked after one of them, and opening a chat alone. "
            "Flagged shares; switch / opening: the switches caught over the same questions "
            "caught opening a chat.",
            "",
            *markdown_table(*sample_table(results)),
        ]
    if results.get("latency"):
        lat = results["latency"]
        lines += [
            "",
            f"**Decision latency** (seed {seeds[0]}'s split; {lat['query']['n']} user turns of "
            f"the test dialogues replayed in order, {lat['query']['later_n']} of them later "
            "turns; one Gate per reading keeps its turn cache as in a chat; the calls "
            "interleaved per turn after a warm-up; a plain embedder; OMP_NUM_THREADS="
            f"{results.get('omp_num_threads', 'unset')}). A later turn's cost: `follow` embeds "
            "the turn (not when it refers back: the join alone), the assistant's last answer "
            "only when the turns do not settle whether it follows, and the join it is read "
            "with when it follows; `follow-mean` the turn alone (its searched vector a mean of "
            "vectors at hand); `recent` embeds the join alone (longer than the turn); "
            "earlier turns come from the gate's turn cache." + rewrite_cost(results),
            "",
            *markdown_table(*latency_table(results)),
        ]
    lines += [
        "",
        "**Targets** (issue 38; standalone calibration, means over seeds; the rewrite on its "
        "subset)",
        "",
        *markdown_table(*targets_table(results)),
    ]
    return lines


ROW_ORDER = (*(ROW_NAMES[r] for r in (*READINGS, REWRITE)), *SUBSET_ROWS.values())
SIZE_ORDER = ("documents kept", "chunks", "calibration dialogues", "test dialogues", *GROUPS)


def ordered(results: dict) -> dict:
    """``results`` as read back from bench_out/conversations.json (keys sorted) in the
    tables' order: rows, sizes, and the latency's query first."""
    rows, sizes = results.get("rows", {}), results.get("sizes", {})
    found = results | {
        "rows": {row: rows[row] for row in ROW_ORDER if row in rows},
        "sizes": {name: sizes[name] for name in SIZE_ORDER if name in sizes},
    }
    if results.get("latency"):
        lat = results["latency"]
        found["latency"] = {name: lat[name] for name in ("query", *READINGS) if name in lat}
    return found


def raw_path(out: Path = OUT) -> Path:
    return out / "conversations.json"


def write(results: dict) -> Path | None:
    """The ``conversations`` section of docs/benchmarks.md, if anything ran."""
    lines = conversations_markdown(results)
    return write_section("conversations", TITLE, "\n".join(lines)) if lines else None


def main(argv: Sequence[str] = ()) -> dict:
    """Run the benchmark, save its raw numbers and write its section; ``render``: write the
    section again from the saved raw numbers, measuring nothing."""
    path = raw_path()
    if list(argv) == ["render"]:
        results = ordered(json.loads(path.read_text(encoding="utf-8")))
    elif argv:
        raise SystemExit(
            f"benchmarks.conversations: unknown arguments {list(argv)}; give none or render"
        )
    else:
        reason = missing_reason()
        if reason:
            print(f"skipping the conversations benchmark: {reason}")
            return {}
        results = conversations_part(OUT, save=lambda found: write_json(path, found))
        write_json(path, results)
    written = write(results)
    if written:
        print(f"raw numbers: {path}; tables written to {written}")
    print("\n".join(markdown_table(*quality_table(results, STANDALONE))))
    print("\n".join(markdown_table(*targets_table(results))))
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
