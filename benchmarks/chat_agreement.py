"""Chat agreement (issue 46, first target): the same chats decided turn by turn through the
service, in process and through each framework adapter; how often each path decides a turn as
expected, and whether every path decides every turn as the service does.

The chats (doc2dial, the issue's own 73-turn set not being available): the conversations
benchmark's split (:func:`benchmarks.conversations.make_split`) with a seed of its own
(:data:`SPLIT_SEED`, none of the other benchmarks' splits), 70% of the document texts indexed
(MiniLM, chunked as ``ragbound index`` does by default), calibrated as that benchmark's default
row is (``Guard.calibrate`` on the calibration dialogues' first questions), with HarmfulQA's
tripwires (:func:`benchmarks.tripwires.splits`: half of each subtopic of the topics kept in)
and the default rule (its floor calibrated on the calibration questions). A seeded sample of
:data:`N_CHATS` test dialogues (kept aside: nothing is tuned on them here), each with one
user turn spliced in before one of its later user turns, at a seeded place:

- a *switch*: the opening question of a left-out document's dialogue from another domain
  (expected ``abstain``: its document is not indexed);
- a *far switch*: a TruthfulQA question (expected ``abstain``);
- a *forbidden* request: a HarmfulQA question of the topics the tripwires cover, not itself a
  tripwire (expected ``reject``).

The spliced kinds take turns over the sample. Every other user turn is the dialogue's own, in
the knowledge, expected ``answer``: the first question, a follow-up, or a follow-up after the
splice (the policy of issue 46: a switch returns to the topic; a forbidden turn is refused at
its turn, then dropped, and the turns after it are decided on their merits). The assistant's
turns are doc2dial's agent turns; after a spliced turn, the reply its expected action gets
(:data:`~ragbound.gate.DEFAULT_ABSTENTION`, :data:`~ragbound.gate.DEFAULT_REFUSAL`). The
expectations come from how the chats are built, never from a decision.

Each user turn is decided with the chat before it (OpenAI-style messages), the caller holding
the history (as a chat application's backend does), through each path:

- ``service``: a real ``ragbound serve`` child on loopback, ``POST /v1/decide`` with the
  messages (the reference the others are compared with);
- ``in process``: ``Gate.decide(messages)``;
- ``langchain agent``: ``create_agent`` with ``GateMiddleware``, invoked with the chat's
  messages (langchain-core's ``GenericFakeChatModel`` as the LLM, a test double);
- ``langchain history chain``: ``gated_chat_chain(GatedChatRetriever(...))`` with
  ``{input, chat_history}`` (the same fake chat model);
- ``llamaindex chat engine``: a ``ContextChatEngine`` with ``GatePostprocessor(memory=)``,
  ``chat(turn, chat_history=...)`` (llama-index-core's ``MockLLM``);
- ``haystack chat pipeline``: ``GateComponent`` -> ``ChatPromptBuilder`` -> haystack's
  ``MockChatGenerator``, the history as ``ChatMessage`` objects.

Each path opens its own ``Gate.load`` of the served folder (its own turn cache), as separate
deployments would. A framework not installed is skipped, with the reason. The service also
decides each dialogue without its splice: the turns after a splice, decided as the same turns
without it, are what the splice cost them (the forbidden-turn policy, a return to the topic).

``python -m benchmarks.run chat-agreement`` (``render``: the section again from
bench_out/chat_agreement.json); ``BENCH_CHAT_N`` chats (default 40). The table goes to the
``chat-agreement`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import conversations as conv
from benchmarks import datasets, near, tripwires, zoo
from benchmarks.doc import markdown_table, measured_or_saved, write_section
from benchmarks.settings import int_value
from ragbound.detect import Guard
from ragbound.embedders import load_dense_embedder
from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, Decision, Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import LiveTripwires, Tripwire

OUT = datasets.REPO / "bench_out"
RAW = OUT / "chat_agreement.json"
TITLE = "Chat agreement: the same chats through the service, in process and each adapter"
SPLIT_SEED = 46  # the conversations benchmark splits with seeds 0-2, the tripwire floor 0
SAMPLE_SEED = 4646
N_CHATS = "40"
SERVICE = "service"
DIFFERS_SHOWN = 20  # differing turns listed in the section
MISSES_KEPT = 12  # turns not decided as expected, kept in the raw numbers per path
QUOTED = 100  # characters of a turn quoted in the section

# kinds of user turn, each with its expected action (from how the chat is built)
FIRST = "first question"
FOLLOW_UP = "follow-up"
AFTER_SWITCH = "follow-up after a switch"
AFTER_FORBIDDEN = "follow-up after a forbidden turn"
SWITCH = "switch: another domain's left-out opening question"
FAR = "far switch: TruthfulQA"
FORBIDDEN = "forbidden: HarmfulQA"
EXPECTED: dict[str, str] = {
    FIRST: "answer",
    FOLLOW_UP: "answer",
    AFTER_SWITCH: "answer",
    AFTER_FORBIDDEN: "answer",
    SWITCH: "abstain",
    FAR: "abstain",
    FORBIDDEN: "reject",
}
KINDS = tuple(EXPECTED)
SPLICES = (SWITCH, FAR, FORBIDDEN)
SPLICE_REPLY = {SWITCH: DEFAULT_ABSTENTION, FAR: DEFAULT_ABSTENTION, FORBIDDEN: DEFAULT_REFUSAL}
AFTER = {SWITCH: AFTER_SWITCH, FAR: AFTER_SWITCH, FORBIDDEN: AFTER_FORBIDDEN}

Decided = tuple[str, float | None, int | None]
"""One turn through one path: the action, the knowledge test's p-value and the turn the
decision says it decided (user turns before it; None: decided as a single query)."""
ChatRun = Callable[["Chat"], list[Decided]]


# ------------------------------------------------------------------------------ chats
@dataclass(frozen=True)
class Chat:
    """A chat as built: OpenAI-style messages and the kind of each user turn, in order."""

    id: str
    messages: tuple[dict[str, str], ...]
    kinds: tuple[str, ...]

    def user_positions(self) -> list[int]:
        """The index in :attr:`messages` of each user turn."""
        return [i for i, m in enumerate(self.messages) if m["role"] == "user"]

    def upto(self, n: int) -> list[dict[str, str]]:
        """The messages up to and including the ``n``-th user turn (0-based)."""
        return [dict(m) for m in self.messages[: self.user_positions()[n] + 1]]

    def expected(self) -> list[str]:
        return [EXPECTED[kind] for kind in self.kinds]


def spliced(dialogue: conv.Dialogue, kind: str, question: str, before: int) -> Chat:
    """``dialogue`` with ``question`` (a turn of ``kind``, one of :data:`SPLICES`) and its
    expected reply inserted before its user turn number ``before`` (1 or more: the chat opens
    with the dialogue's own question)."""
    positions = [i for i, m in enumerate(dialogue.messages) if m["role"] == "user"]
    if not 1 <= before < len(positions):
        raise ValueError(f"splice before user turn {before}: the dialogue has {len(positions)}")
    at = positions[before]
    inserted = (
        {"role": "user", "content": question},
        {"role": "assistant", "content": SPLICE_REPLY[kind]},
    )
    messages = (*dialogue.messages[:at], *inserted, *dialogue.messages[at:])
    own = [FIRST, *[FOLLOW_UP] * (before - 1)]
    kinds = (*own, kind, *[AFTER[kind]] * (len(positions) - before))
    return Chat(f"{dialogue.id} + {kind.split(':')[0]}", messages, kinds)


def splice_index(chat: Chat) -> int:
    """The user turn number of ``chat``'s spliced turn."""
    return next(n for n, kind in enumerate(chat.kinds) if kind in SPLICES)


def unspliced(chat: Chat) -> Chat:
    """``chat`` without its spliced turn and the reply to it: the dialogue as doc2dial has it
    (its turns after the splice become plain follow-ups)."""
    n = splice_index(chat)
    at = chat.user_positions()[n]
    kinds = [FOLLOW_UP if kind in AFTER.values() else kind for kind in chat.kinds]
    return Chat(
        chat.id.split(" + ")[0],
        (*chat.messages[:at], *chat.messages[at + 2 :]),
        (*kinds[:n], *kinds[n + 1 :]),
    )


def domain_of(corpus: conv.Corpus) -> dict[str, str]:
    """Document id -> its doc2dial domain (dmv, ssa, va, studentaid)."""
    return {d.id: d.source.split("/", 1)[1] for d in corpus.documents}


def make_chats(
    corpus: conv.Corpus, split: conv.Split, forbidden: Sequence[str], n: int, seed: int
) -> list[Chat]:
    """``n`` test dialogues of ``split`` (a seeded sample, in the sample's order), each with
    one spliced turn: switch, far switch and forbidden in turn; the question and the place
    (before a seeded later user turn) drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    domains = domain_of(corpus)
    outside = [d for d in corpus.dialogues if d.document not in split.kept]
    test = [d for d in split.test if sum(m["role"] == "user" for m in d.messages) >= 2]
    picked = [test[i] for i in rng.permutation(len(test))[:n]]
    harmful = [forbidden[i] for i in rng.permutation(len(forbidden))]
    chats = []
    for i, dialogue in enumerate(picked):
        kind = SPLICES[i % len(SPLICES)]
        if kind == SWITCH:
            others = [d for d in outside if domains[d.document] != domains[dialogue.document]]
            question = others[rng.integers(len(others))].turns()[0].last_user
        elif kind == FAR:
            question = corpus.far[rng.integers(len(corpus.far))]
        else:
            question = harmful[i % len(harmful)]
        users = sum(m["role"] == "user" for m in dialogue.messages)
        chats.append(spliced(dialogue, kind, question, int(rng.integers(1, users))))
    return chats


# ------------------------------------------------------------------------------ set-up
def served_folder(
    split: conv.Split, embedder: near.CachedEmbedder, harmful: list[Tripwire], folder: Path
) -> Path:
    """The split's knowledge base saved in ``folder``, calibrated on the calibration
    dialogues' first questions, with the tripwires ``harmful`` and the default rule."""
    if folder.exists():
        shutil.rmtree(folder)
    split.kb.save(folder)
    kb = KnowledgeBase.load(folder, embedder=embedder)
    Guard.calibrate(kb, split.first_questions()).save()
    LiveTripwires.open(kb).add(harmful, source="HarmfulQA (benchmark split)")
    return folder


# ------------------------------------------------------------------------------- paths
def _decided(decision: Decision | dict) -> Decided:
    found = Decision.model_validate(decision) if isinstance(decision, dict) else decision
    turn = None if found.conversation is None else found.conversation.turn
    return found.action, found.test.p_value, turn


def _turns(chat: Chat, decide: Callable[[list[dict[str, str]]], Decided]) -> list[Decided]:
    """Each user turn of ``chat`` decided with the messages before it."""
    return [decide(chat.upto(n)) for n in range(len(chat.kinds))]


@contextmanager
def service_path(kb_dir: Path) -> Iterator[ChatRun]:
    """A real ``ragbound serve`` on loopback (one thread, as by default), ``/v1/decide``."""
    import httpx

    from benchmarks.serve import ServerChild, ServeSetting

    server = ServerChild(kb_dir, ServeSetting(1), kb_dir.parent / "server")
    with server, httpx.Client(base_url=server.url, timeout=120) as client:

        def decide(messages: list[dict[str, str]]) -> Decided:
            response = client.post("/v1/decide", json={"messages": messages})
            if response.status_code != 200:
                raise RuntimeError(f"/v1/decide answered {response.status_code}: {response.text}")
            return _decided(response.json())

        yield lambda chat: _turns(chat, decide)


@contextmanager
def in_process_path(kb_dir: Path) -> Iterator[ChatRun]:
    gate = Gate.load(kb_dir)
    yield lambda chat: _turns(chat, lambda messages: _decided(gate.decide(messages)))


REPLY = "Here is what the documents say."  # the test doubles' reply (never in a chat here)


def _fake_chat_model():
    """langchain-core's scripted chat model (a test double): REPLY at every call."""
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    return GenericFakeChatModel(messages=(AIMessage(REPLY) for _ in itertools.count()))


@contextmanager
def langchain_agent_path(kb_dir: Path) -> Iterator[ChatRun]:
    """``create_agent`` with ``GateMiddleware``, invoked with the chat's messages."""
    from langchain.agents import create_agent

    from ragbound.adapters.langchain_agent import GateMiddleware

    agent = create_agent(
        _fake_chat_model(), tools=[], middleware=[GateMiddleware(Gate.load(kb_dir))]
    )

    def decide(messages: list[dict[str, str]]) -> Decided:
        return _decided(agent.invoke({"messages": messages})["ragbound_decision"])

    yield lambda chat: _turns(chat, decide)


LANGCHAIN_ROLE = {"user": "human", "assistant": "ai", "system": "system"}


@contextmanager
def langchain_chain_path(kb_dir: Path) -> Iterator[ChatRun]:
    """``gated_chat_chain`` over ``{input, chat_history}``."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    from ragbound.adapters.langchain import GatedRetriever
    from ragbound.adapters.langchain_chat import GatedChatRetriever, gated_chat_chain

    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer from the documents:\n{context}"),
            MessagesPlaceholder("chat_history"),
            ("human", "{input}"),
        ]
    )
    retriever = GatedChatRetriever(retriever=GatedRetriever(gate=Gate.load(kb_dir)))
    bot = gated_chat_chain(retriever, prompt | _fake_chat_model() | StrOutputParser())

    def decide(messages: list[dict[str, str]]) -> Decided:
        history = [(LANGCHAIN_ROLE[m["role"]], m["content"]) for m in messages[:-1]]
        out = bot.invoke({"input": messages[-1]["content"], "chat_history": history})
        return _decided(out["ragbound_decision"])

    yield lambda chat: _turns(chat, decide)


@contextmanager
def llamaindex_path(kb_dir: Path) -> Iterator[ChatRun]:
    """A ``ContextChatEngine`` whose memory the ``GatePostprocessor`` reads; the history set
    at each turn (``chat(turn, chat_history=...)``)."""
    from llama_index.core import SummaryIndex
    from llama_index.core.chat_engine import ContextChatEngine
    from llama_index.core.llms import ChatMessage, MockLLM
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.schema import TextNode

    from ragbound.adapters.llamaindex import GatePostprocessor

    gate = Gate.load(kb_dir)
    memory = ChatMemoryBuffer.from_defaults(token_limit=1_000_000)
    postprocessor = GatePostprocessor(gate=gate, memory=memory)
    nodes = [TextNode(text=chunk.text) for chunk in gate.guard.kb.chunks[:3]]
    engine = ContextChatEngine.from_defaults(
        SummaryIndex(nodes).as_retriever(),
        memory=memory,
        node_postprocessors=[postprocessor],
        llm=MockLLM(max_tokens=6),  # a test double: six words
    )

    def decide(messages: list[dict[str, str]]) -> Decided:
        history = [ChatMessage(role=m["role"], content=m["content"]) for m in messages[:-1]]
        engine.chat(messages[-1]["content"], chat_history=history)
        assert postprocessor.last_decision is not None
        return _decided(postprocessor.last_decision)

    yield lambda chat: _turns(chat, decide)


HAYSTACK_TEMPLATE = """{% message role="system" %}Answer from these documents:
{% for d in documents %}{{ d.content }}
{% endfor %}{% endmessage %}
{% for m in history %}{% message role=m.role.value %}{{ m.text }}{% endmessage %}
{% endfor %}{% message role="user" %}{{ query }}{% endmessage %}"""


@contextmanager
def haystack_path(kb_dir: Path) -> Iterator[ChatRun]:
    """gate -> ChatPromptBuilder -> haystack's MockChatGenerator, the history passed in."""
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    from haystack import Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import MockChatGenerator
    from haystack.dataclasses import ChatMessage

    from ragbound.adapters.haystack import GateComponent

    pipe = Pipeline()
    pipe.add_component("gate", GateComponent(gate=Gate.load(kb_dir)))
    pipe.add_component("prompt", ChatPromptBuilder(HAYSTACK_TEMPLATE, required_variables=["query"]))
    pipe.add_component("llm", MockChatGenerator(responses=REPLY))  # a test double
    pipe.connect("gate.documents", "prompt.documents")
    pipe.connect("gate.query", "prompt.query")
    pipe.connect("prompt.prompt", "llm.messages")
    made = {"user": ChatMessage.from_user, "assistant": ChatMessage.from_assistant}

    def decide(messages: list[dict[str, str]]) -> Decided:
        history = [made[m["role"]](m["content"]) for m in messages[:-1]]
        query = messages[-1]["content"]
        inputs = {"gate": {"query": query, "history": history}, "prompt": {"history": history}}
        return _decided(pipe.run(inputs, include_outputs_from={"gate"})["gate"]["decision"])

    yield lambda chat: _turns(chat, decide)


PATHS: dict[str, Callable[[Path], AbstractContextManager[ChatRun]]] = {
    SERVICE: service_path,
    "in process": in_process_path,
    "langchain agent": langchain_agent_path,
    "langchain history chain": langchain_chain_path,
    "llamaindex chat engine": llamaindex_path,
    "haystack chat pipeline": haystack_path,
}


def run_path(name: str, kb_dir: Path, chats: Sequence[Chat]) -> dict:
    """Every chat through path ``name``: each turn's (action, p-value, turn decided) and the
    seconds per turn (p50); ``skipped`` with the reason when its framework is missing."""
    try:
        opened = PATHS[name](kb_dir)
        run = opened.__enter__()
    except ImportError as exc:
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    seconds: list[float] = []
    decided: list[list[Decided]] = []
    try:
        for chat in chats:
            start = time.perf_counter()
            decided.append(run(chat))
            seconds.append((time.perf_counter() - start) / len(chat.kinds))
    finally:
        opened.__exit__(None, None, None)
    return {"decided": decided, "p50_ms_per_turn": float(np.median(seconds)) * 1e3}


# ------------------------------------------------------------------------------ tallies
def tally(chats: Sequence[Chat], decided: Sequence[Sequence[Decided]]) -> dict:
    """One path's turns decided as expected, per kind and in all ([as expected, turns]), the
    turns it decided as the whole chat (the turn the decision names is the turn's own), and
    its turns not decided as expected (the first :data:`MISSES_KEPT`, to read)."""
    by_kind = {kind: [0, 0] for kind in KINDS}
    whole, misses = 0, []
    for chat, turns in zip(chats, decided, strict=True):
        for n, (kind, (action, _, turn)) in enumerate(zip(chat.kinds, turns, strict=True)):
            hit = action == EXPECTED[kind]
            by_kind[kind][0] += hit
            by_kind[kind][1] += 1
            whole += turn == n
            if not hit and len(misses) < MISSES_KEPT:
                text = chat.upto(n)[-1]["content"]
                misses.append(
                    {"chat": chat.id, "turn": n, "kind": kind, "action": action, "text": text}
                )
    total = [sum(v[0] for v in by_kind.values()), sum(v[1] for v in by_kind.values())]
    return {"by_kind": by_kind, "all": total, "whole_chat": whole, "misses": misses}


def differences(
    chats: Sequence[Chat],
    decided: Sequence[Sequence[Decided]],
    reference: Sequence[Sequence[Decided]],
) -> tuple[list[dict], float]:
    """The turns whose action differs from ``reference``'s (the service's), and the largest
    gap between the two p-values over every turn (0.0 when none has one)."""
    found, gap = [], 0.0
    for chat, turns, served in zip(chats, decided, reference, strict=True):
        for n, ((action, p, _), (s_action, s_p, _)) in enumerate(zip(turns, served, strict=True)):
            if p is not None and s_p is not None:
                gap = max(gap, abs(p - s_p))
            if action != s_action:
                found.append(
                    {
                        "chat": chat.id,
                        "turn": n,
                        "kind": chat.kinds[n],
                        "action": action,
                        "service": s_action,
                        "p_value": p,
                        "service_p_value": s_p,
                    }
                )
    return found, gap


AFTER_CAUGHT = {SWITCH: "after a switch caught", FORBIDDEN: "after a forbidden request rejected"}
AFTER_MISSED = {SWITCH: "after a switch missed", FORBIDDEN: "after a forbidden request missed"}


def splice_cost(
    chats: Sequence[Chat], decided: Sequence[Sequence[Decided]], plain: Sequence[Sequence[Decided]]
) -> dict[str, list[int]]:
    """What a splice costs the turns after it: per group (the splice caught or missed, a
    switch near or far taken together), [turns decided as the same turn of the dialogue
    without the splice (``plain``), turns]."""
    found: dict[str, list[int]] = {}
    for chat, turns, alone in zip(chats, decided, plain, strict=True):
        n = splice_index(chat)
        kind = FORBIDDEN if chat.kinds[n] == FORBIDDEN else SWITCH
        caught = turns[n][0] == EXPECTED[chat.kinds[n]]
        group = found.setdefault((AFTER_CAUGHT if caught else AFTER_MISSED)[kind], [0, 0])
        for after, before in zip(turns[n + 1 :], alone[n:], strict=True):
            group[0] += after[0] == before[0]
            group[1] += 1
    order = [*AFTER_CAUGHT.values(), *AFTER_MISSED.values()]
    return {name: found[name] for name in order if name in found}


def summarise(chats: Sequence[Chat], runs: dict[str, dict]) -> dict[str, dict]:
    """Per path: its tally, its differences from the service, its speed (or why skipped)."""
    reference = runs.get(SERVICE, {}).get("decided")
    out: dict[str, dict] = {}
    for name, run in runs.items():
        if "decided" not in run:
            out[name] = {"skipped": run.get("skipped", "not run")}
            continue
        found = tally(chats, run["decided"])
        found["p50_ms_per_turn"] = run["p50_ms_per_turn"]
        if reference is not None and name != SERVICE:
            found["differs"], found["max_p_gap"] = differences(chats, run["decided"], reference)
        out[name] = found
    return out


# ------------------------------------------------------------------------------- part
def source_state() -> str:
    """The commit the checkout is at, and whether src/ has uncommitted changes (several
    people change the tree at once: the numbers are of the tree as it was)."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=datasets.REPO, capture_output=True, text=True)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--", "src"))
    return f"{commit}, with uncommitted changes in src/" if dirty else commit


def chat_agreement_part(
    out: Path = OUT,
    corpus: conv.Corpus | None = None,
    n_chats: int | None = None,
) -> dict:
    """Build the chats and the served folder (under ``out``/chat_agreement), run every path
    and summarise them."""
    began = time.perf_counter()
    n_chats = n_chats if n_chats is not None else int_value("BENCH_CHAT_N", N_CHATS, 1, N_CHATS)
    corpus = corpus or conv.load_corpus()
    work = out / "chat_agreement"
    embedder = near.CachedEmbedder(load_dense_embedder(conv.SPEC), work / "query-cache")
    # the whole corpus's index, shared with the tripwire floor's doc2dial (built if absent)
    cache = zoo.CACHE if out == OUT else work
    split = conv.make_split(corpus, conv.cached_kb(corpus, cache, embedder), SPLIT_SEED)
    # HarmfulQA's tripwires, and its in-topic test quarter (none a tripwire) as the requests
    harmful = tripwires.splits(tripwires.SEED)
    chats = make_chats(corpus, split, harmful["test_in_topic"], n_chats, SAMPLE_SEED)
    kb_dir = served_folder(split, embedder, harmful["tripwires"], work / "kb")
    runs = {name: run_path(name, kb_dir, chats) for name in PATHS if name != SERVICE}
    # the service also decides the dialogues without their splices: what a splice costs
    plain = [unspliced(chat) for chat in chats]
    served = run_path(SERVICE, kb_dir, [*chats, *plain])
    cost = None
    if "decided" in served:
        cost = splice_cost(chats, served["decided"][: len(chats)], served["decided"][len(chats) :])
        served["decided"] = served["decided"][: len(chats)]
    runs = {SERVICE: served, **runs}
    turns = [kind for chat in chats for kind in chat.kinds]
    return {
        "source": source_state(),
        "split_seed": SPLIT_SEED,
        "sample_seed": SAMPLE_SEED,
        "chats": len(chats),
        "turns": {kind: turns.count(kind) for kind in KINDS},
        "sizes": {
            "documents kept": len(split.kept),
            "chunks": len(split.kb.chunks),
            "calibration questions": len(split.calibration),
            "test dialogues": len(split.test),
            "tripwires": len(harmful["tripwires"]),
        },
        "paths": summarise(chats, runs),
        "splice_cost": cost,
        "service_turns": {
            chat.id: [list(turn) for turn in turns]
            for chat, turns in zip(chats, runs[SERVICE].get("decided", []), strict=False)
        },
        "total_s": time.perf_counter() - began,
    }


# ----------------------------------------------------------------------------- markdown
def _share(pair: Sequence[int]) -> str:
    hits, n = pair
    return f"{hits}/{n} ({hits / n:.2f})" if n else ""


def expected_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """A row per kind of turn (its expected action, its turns), a column per path run: turns
    decided as expected; the last row all turns."""
    ran = {name: found for name, found in results["paths"].items() if "by_kind" in found}
    header = ["turn", "expected", *ran]
    rows = [
        [kind, EXPECTED[kind], *(_share(found["by_kind"][kind]) for found in ran.values())]
        for kind in KINDS
        if results["turns"].get(kind)
    ]
    rows.append(["**all turns**", "", *(f"**{_share(found['all'])}**" for found in ran.values())])
    return header, rows


def agreement_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """A row per path: turns decided, decided as the whole chat, actions differing from the
    service's, the largest p-value gap to it, and p50 ms per turn."""
    header = [
        "path",
        "turns",
        "decided as the chat",
        "actions differing from the service",
        "largest p-value gap",
        "p50 ms a turn",
    ]
    rows = []
    for name, found in results["paths"].items():
        if "skipped" in found:
            rows.append([name, f"skipped: {found['skipped']}", "", "", "", ""])
            continue
        differs = "(the reference)" if name == SERVICE else str(len(found.get("differs", [])))
        gap = "" if name == SERVICE else f"{found.get('max_p_gap', 0.0):.4f}"
        turns = found["all"][1]
        whole = f"{found['whole_chat']}/{turns}"
        rows.append([name, str(turns), whole, differs, gap, f"{found['p50_ms_per_turn']:.0f}"])
    return header, rows


def differing_lines(results: dict) -> list[str]:
    """The turns whose action differs from the service's (at most :data:`DIFFERS_SHOWN`)."""
    found = [(name, d) for name, path in results["paths"].items() for d in path.get("differs", [])]
    if not found:
        return ["Every path decided every turn as the service did."]
    lines = [f"{len(found)} turns differ from the service:", ""]
    for name, d in found[:DIFFERS_SHOWN]:
        lines.append(
            f"- {name}, {d['chat']}, user turn {d['turn']} ({d['kind']}): {d['action']} "
            f"(p {d['p_value']}) against the service's {d['service']} (p {d['service_p_value']})"
        )
    return lines


def missed_lines(results: dict) -> list[str]:
    """The service's first turns not decided as expected, to read (a forbidden request's
    text left out)."""
    misses = results["paths"].get(SERVICE, {}).get("misses", [])
    lines = []
    for miss in misses:
        text = miss["text"] if miss["kind"] != FORBIDDEN else "(a HarmfulQA question)"
        short = text if len(text) <= QUOTED else text[: QUOTED - 3] + "..."
        lines.append(
            f"- {miss['chat']}, user turn {miss['turn']} ({miss['kind']}, expected "
            f'{EXPECTED[miss["kind"]]}): {miss["action"]}: "{short}"'
        )
    return lines


def agreement_markdown(results: dict) -> list[str]:
    if not results.get("paths"):
        return []
    sizes = results["sizes"]
    turns = sum(results["turns"].values())
    lines = [
        f"doc2dial, the conversations benchmark's split with seed {results['split_seed']} "
        f"({sizes['documents kept']} documents kept, {sizes['chunks']:,} chunks, MiniLM as "
        f"`ragbound index` does by default), calibrated on {sizes['calibration questions']} "
        "calibration dialogues' first questions (`Guard.calibrate`, alpha 0.05), with "
        f"{sizes['tripwires']} HarmfulQA tripwires and the default rule. {results['chats']} "
        f"test dialogues sampled (seed {results['sample_seed']}, kept aside: nothing tuned on "
        f"them), {turns} user turns: each dialogue with one turn spliced in before one of its "
        "later user turns: a left-out document's opening question from another domain "
        "(switch), a TruthfulQA question (far switch) or a HarmfulQA question of the "
        "tripwires' topics, not itself a tripwire (forbidden), in turn. The assistant turns "
        "are doc2dial's agent turns, and the refusal or abstention text after a spliced "
        "turn. Expected actions come from how the chats are built: the dialogue's own turns "
        "`answer` (after a switch: the chat returns to its topic; after a forbidden turn: the "
        "turn is dropped and the rest decided on its merits), switches `abstain`, forbidden "
        "requests `reject`. Each user turn is decided with the chat before it, the caller "
        "holding the history; each path its own `Gate.load`; the frameworks' LLMs are their "
        "own test doubles (GenericFakeChatModel, MockLLM, MockChatGenerator), their replies "
        "never enter a chat. The service: a real `ragbound serve` child on loopback, "
        f"`POST /v1/decide` with the messages. The run took {results['total_s'] / 60:.1f} min"
        + (f", on {results['source']}." if results.get("source") else "."),
        "",
        "**Turns decided as expected** (issue 46's bar on its own 73-turn chats, not "
        "available here: 66/73 = 0.90 through the service and through `GateMiddleware`)",
        "",
        *markdown_table(*expected_table(results)),
        "",
        "**Agreement with the service** (a path's action against the service's on the same "
        "turn: the target is none differing; decided as the chat: the decision names the "
        "turn's own index, not a single query; ms: the paths run one after another on a "
        "shared machine, the framework's own work included, not a latency benchmark)",
        "",
        *markdown_table(*agreement_table(results)),
        "",
        *differing_lines(results),
    ]
    if results.get("splice_cost"):
        lines += [
            "",
            "**What a splice costs the turns after it** (through the service: the dialogue's "
            "own turns after the spliced one, decided as the same turns of the dialogue "
            "without it; a switch near or far; caught: decided as expected)",
            "",
            *markdown_table(
                ["turns", "decided as without the splice"],
                [[name, _share(pair)] for name, pair in results["splice_cost"].items()],
            ),
        ]
    missed = missed_lines(results)
    if missed:
        lines += ["", f"The service's first {len(missed)} turns not decided as expected:", ""]
        lines += missed
    return lines


def write(results: dict) -> Path | None:
    lines = agreement_markdown(results)
    return write_section("chat-agreement", TITLE, "\n".join(lines)) if lines else None


def measure() -> dict:
    reason = conv.missing_reason() or datasets.tripwire_missing_reason()
    if reason:
        print(f"skipping the chat agreement benchmark: {reason}")
        return {}
    return chat_agreement_part()


def main(argv: Sequence[str] = ()) -> dict:
    """Run the benchmark, save its raw numbers and write its section; ``render``: the section
    again from the saved raw numbers, measuring nothing."""
    results = measured_or_saved(argv, RAW, measure, "chat_agreement")
    written = write(results)
    if written:
        print(f"raw numbers: {RAW}; tables written to {written}")
    print("\n".join(agreement_markdown(results)) or "nothing ran")
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
