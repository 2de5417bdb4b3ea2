"""Leave-one-out runs: context construction, HyDE, prompt variants, resume, failures, cache,
random-synthetic mode and the CLI, with scripted models and a keyword-count embedder whose
cosines can be worked out by hand."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ragbound.bench import ExperimentInput, RunDir
from ragbound.bench.config import BenchConfig
from ragbound.bench.context import (
    leave_one_out_probes,
    parse_hypothetical_answers,
    read_knowledge,
    render_context,
    sample_probes,
)
from ragbound.bench.experiment import RunManifest, run_experiment
from ragbound.embedders import EmbedderInfo
from ragbound.errors import InputError
from ragbound.llm import ChatMessage, GenerationParams, ParseError, load_prompt
from tests.cli.runner import run as run_cli
from tests.llm.llm_fakes import ScriptedLLM

KEYWORDS = ("bee", "wax", "train", "volcano", "tea")

# (id, question, answer); keyword counts: a=bee, b=bee+wax, c=2 bee, d=2 volcano, e=2 tea, f=2 train
PAIRS = [
    ("a", "How many eyes does a bee have?", "Five."),
    ("b", "What does a bee build its comb from?", "From wax."),
    (
        "c",
        "Why do beekeepers use smoke near a hive?",
        "Smoke masks the alarm scent; the colony stays calm.",
    ),
    ("d", "Which volcano buried Pompeii?", "Vesuvius, a volcano near Naples."),
    (
        "e",
        "At what temperature is green tea brewed?",
        "Green tea is brewed at 70 to 80 degrees Celsius.",
    ),
    (
        "f",
        "What gauge does the first bullet train use?",
        "Standard gauge; the train runs on 1,435 mm track.",
    ),
]
HYPOTHESES = ["A volcano erupted there.", "They served tea.", "It was sealed with wax."]


class KeywordEmbedder:
    """Counts of five keywords (substrings, case-folded): cosines are easy to compute by hand."""

    info = EmbedderInfo(
        name="keywords", revision="1", dimension=len(KEYWORDS), similarity="cosine", kind="dense"
    )

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        rows = [[text.casefold().count(word) for word in KEYWORDS] for text in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), len(KEYWORDS))


def qa_set(name: str, pairs: Sequence[tuple[str, str, str]], fmt: str = "qa") -> dict:
    records = [
        {
            "id": pair_id,
            "question": question,
            "answer": answer,
            "origin": "imported",
            "provenance": {"created_at": "2025-01-01T00:00:00+00:00"},
        }
        for pair_id, question, answer in pairs
    ]
    if fmt == "qa":
        return {"format": "ragbound.bench.qa/1", "name": name, "pairs": records}
    return {
        "format": "ragbound.bench.filtered/1",
        "name": name,
        "method": "none",
        "input_hash": "0" * 64,
        "kept": records,
        "provenance": {"created_at": "2025-01-01T00:00:00+00:00"},
    }


@pytest.fixture
def knowledge(tmp_path: Path) -> Path:
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(qa_set("mixed", PAIRS)), encoding="utf-8")
    return path


def system_of(messages: list[ChatMessage]) -> str:
    return messages[0].content if messages and messages[0].role == "system" else ""


def responder(messages: list[ChatMessage], params: GenerationParams) -> str:
    """HyDE prompts get three fixed hypotheses; target prompts get an abstention."""
    if system_of(messages).startswith("You are a hypothetical answer generator"):
        return json.dumps({"answers": HYPOTHESES})
    return "I don't know. No citation."


def config(knowledge: Path, tmp_path: Path, **settings) -> BenchConfig:
    base = {
        "knowledge": [knowledge],
        "models": ["local"],
        "strategies": ["direct", "long_context", "rag", "hyde"],
        "k": 2,
        "concurrency": 2,
        "cache": False,
        "out": tmp_path / "run",
    }
    return BenchConfig.model_validate(base | settings)


def run(cfg: BenchConfig, llm, **llms):
    return run_experiment(cfg, llms={"local": llm, **llms}, embedder=KeywordEmbedder())


def by(inputs: list[ExperimentInput], strategy: str) -> dict[str, ExperimentInput]:
    return {item.qa_id: item for item in inputs if item.strategy == strategy}


def test_each_question_sees_every_pair_but_its_own(knowledge: Path, tmp_path: Path) -> None:
    summary = run(config(knowledge, tmp_path), ScriptedLLM(responder=responder))
    inputs = RunDir(tmp_path / "run").inputs()
    assert (summary.items, summary.done, summary.failed) == (24, 24, 0)
    for qa_id, item in by(inputs, "long_context").items():
        assert [c.qa_id for c in item.context] == [p[0] for p in PAIRS if p[0] != qa_id]
        assert [c.number for c in item.context] == [1, 2, 3, 4, 5]
        assert item.expected_answer == dict((p[0], p[2]) for p in PAIRS)[qa_id]
    assert all(item.context == [] for item in by(inputs, "direct").values())
    assert len({item.id for item in inputs}) == len(inputs)


def test_rag_takes_the_top_k_by_cosine_without_the_left_out_pair(
    knowledge: Path, tmp_path: Path
) -> None:
    run(config(knowledge, tmp_path), ScriptedLLM(responder=responder))
    rag = by(RunDir(tmp_path / "run").inputs(), "rag")
    # a's question is (1,0,0,0,0): c (bee x2) scores 1, b (bee, wax) 1/sqrt(2); a itself, which
    # would tie with c and come first in set order, is left out
    context = rag["a"].context
    assert [(c.number, c.qa_id) for c in context] == [(1, "c"), (2, "b")]
    assert [c.similarity for c in context] == pytest.approx([1.0, 1 / math.sqrt(2)])
    assert [c.qa_id for c in rag["c"].context] == ["a", "b"]  # c's own pair is the best match
    assert "Fact 1:\nQuestion: Why do beekeepers" in render_context(context)


def test_hyde_averages_the_embeddings_of_three_hypothetical_answers(
    knowledge: Path, tmp_path: Path
) -> None:
    llm = ScriptedLLM(responder=responder)
    run(config(knowledge, tmp_path, k=3), llm)
    hyde = by(RunDir(tmp_path / "run").inputs(), "hyde")
    assert all(item.hypothetical_answers == HYPOTHESES for item in hyde.values())
    # the mean of the unit vectors volcano, tea and wax is (0, 1, 0, 1, 1)/3: cosine 1/sqrt(3)
    # with d (volcano) and e (tea), 1/sqrt(6) with b (bee, wax); no single answer ties d and e
    context = hyde["f"].context
    assert [c.qa_id for c in context] == ["d", "e", "b"]
    expected = [1 / math.sqrt(3), 1 / math.sqrt(3), 1 / math.sqrt(6)]
    assert [c.similarity for c in context] == pytest.approx(expected)
    assert [c.qa_id for c in hyde["d"].context] == ["e", "b", "a"]  # d left out of its own
    asked = [m[-1].content for m, _ in llm.calls if system_of(m).startswith("You are a hypo")]
    assert sorted(asked) == sorted(p[1] for p in PAIRS)  # one HyDE call per question


def test_a_hyde_model_writes_the_hypotheses_once_for_every_target(
    knowledge: Path, tmp_path: Path
) -> None:
    writer = ScriptedLLM(responder=responder, model_id="fake:writer")
    target = ScriptedLLM(responder=responder)
    other = ScriptedLLM(responder=responder, model_id="fake:other")
    cfg = config(
        knowledge,
        tmp_path,
        strategies=["hyde"],
        models=["local", {"spec": "openai:x", "name": "other"}],
        hyde_model={"spec": "openai:writer", "name": "writer"},
    )
    summary = run(cfg, target, other=other, writer=writer)
    assert (summary.items, summary.done) == (12, 12)
    assert len(writer.calls) == len(PAIRS)
    assert len(target.calls) == len(other.calls) == len(PAIRS)
    manifest = RunManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    assert manifest.models == {
        "writer": "fake:writer",
        "local": "fake:scripted",
        "other": "fake:other",
    }


def test_unreadable_hypotheses_block_only_their_items(knowledge: Path, tmp_path: Path) -> None:
    def vague_on_volcanoes(messages: list[ChatMessage], params: GenerationParams) -> str:
        if "volcano" in messages[-1].content and system_of(messages).startswith("You are a hypo"):
            return "Perhaps something happened."
        return responder(messages, params)

    summary = run(config(knowledge, tmp_path), ScriptedLLM(responder=vague_on_volcanoes))
    assert (summary.items, summary.done, summary.failed) == (24, 23, 1)
    manifest = RunManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    [failure] = manifest.input_failures
    assert (failure.stage, failure.qa_id, failure.items) == ("hyde", "d", 1)
    assert "Perhaps something happened." in failure.error
    assert "d" not in by(RunDir(tmp_path / "run").inputs(), "hyde")


@pytest.mark.parametrize(
    "reply",
    [
        '{"answers": ["one", "two", "three", "four"]}',
        "Here are three hypothetical answers:\n1. one\n2. two\n3. three",
        "Answer 1: one\nAnswer 2: two\nAnswer 3: three",
        "```\n- one\n- two\n- three\n```",
    ],
)
def test_hypothetical_answers_are_read_from_json_or_lists(reply: str) -> None:
    assert parse_hypothetical_answers(reply) == ["one", "two", "three"]


def test_fewer_than_three_hypothetical_answers_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="expected 3"):
        parse_hypothetical_answers('{"answers": ["one", "two"]}')


def test_the_three_system_prompts_load_and_are_each_asked(knowledge: Path, tmp_path: Path) -> None:
    conservative = load_prompt("bench-system-conservative").render(question="Q?", context="C")
    assert conservative[0].content.splitlines()[:2] == [
        "You are a helpful assistant who relies strictly on the given context to provide answers.",
        'If you cannot find a clear answer in the context, respond with "I don\'t know".',
    ]
    assert conservative[0].content.endswith("Pick one citation at the maximum, or no citation.")
    prompts = ["bench-system-basic", "bench-system-conservative", "bench-system-opinion"]
    llm = ScriptedLLM(responder=responder)
    summary = run(config(knowledge, tmp_path, strategies=["direct"], prompts=prompts), llm)
    assert summary.done == 3 * len(PAIRS)
    systems = {system_of(messages) for messages, _ in llm.calls}
    expected = {load_prompt(p).render(question="", context="")[0].content for p in prompts}
    assert systems == expected and len(expected) == 3
    inputs = RunDir(tmp_path / "run").inputs()
    assert {(i.system_prompt, i.prompt_version) for i in inputs} == {(p, 1) for p in prompts}


class Crash(BaseException):
    """Stands in for a kill: not an Exception, so the run cannot record it as a failure."""


def test_an_interrupted_run_resumes_without_redoing_finished_items(
    knowledge: Path, tmp_path: Path
) -> None:
    cfg = config(knowledge, tmp_path, strategies=["direct", "long_context", "rag"], concurrency=3)
    calls = 0

    def crash_after_seven(messages: list[ChatMessage], params: GenerationParams) -> str:
        nonlocal calls
        calls += 1
        if calls > 7:
            raise Crash()
        return f"answer {calls}"

    with pytest.raises(Crash):
        run(cfg, ScriptedLLM(responder=crash_after_seven, delay=0.01))
    log = RunDir(tmp_path / "run").outputs()
    finished = {output.input_id: output.answer for output in log.read()}
    assert len(finished) == 7 and None not in finished.values()

    second = ScriptedLLM(responder=responder)
    summary = run(cfg, second)
    assert (summary.items, summary.skipped, summary.done, summary.failed) == (18, 7, 11, 0)
    assert len(second.calls) == 11
    outputs = log.read()
    assert len(outputs) == 18 and len({o.input_id for o in outputs}) == 18
    assert {o.input_id: o.answer for o in outputs if o.input_id in finished} == finished
    assert {o.input_id for o in outputs} == {i.id for i in RunDir(tmp_path / "run").inputs()}

    third = ScriptedLLM()  # no script: any call would fail the test
    assert run(cfg, third).skipped == 18 and third.calls == []
    manifest = RunManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    assert [(r.done, r.skipped) for r in manifest.runs] == [(11, 7), (0, 18)]


def test_failed_calls_are_recorded_then_asked_again(knowledge: Path, tmp_path: Path) -> None:
    cfg = config(knowledge, tmp_path, strategies=["direct"])

    def down_for_volcanoes(messages: list[ChatMessage], params: GenerationParams) -> str:
        if "volcano" in messages[-1].content:
            raise ConnectionError("server went away")
        return "Five."

    first = run(cfg, ScriptedLLM(responder=down_for_volcanoes))
    assert (first.done, first.failed) == (5, 1)
    [failed] = [o for o in RunDir(tmp_path / "run").outputs().read() if o.error]
    assert failed.error == "ConnectionError: server went away" and failed.answer is None

    second = ScriptedLLM(responder=responder)
    again = run(cfg, second)
    assert (again.skipped, again.done, again.failed) == (5, 1, 0)
    assert ["volcano" in m[-1].content for m, _ in second.calls] == [True]
    records = [
        o for o in RunDir(tmp_path / "run").outputs().read() if o.input_id == failed.input_id
    ]
    assert [o.error is None for o in records] == [False, True]  # the failure stays on record


def test_a_warm_cache_answers_a_fresh_run_without_calls(knowledge: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = config(knowledge, tmp_path, cache=cache, out=tmp_path / "one")
    run(first, ScriptedLLM(responder=responder))
    silent = ScriptedLLM()
    summary = run(first.model_copy(update={"out": tmp_path / "two"}), silent)
    assert (summary.done, silent.calls) == (24, [])
    outputs = RunDir(tmp_path / "two").outputs().read()
    assert all(o.provenance.cached and o.answer for o in outputs)
    assert summary.llm_seconds == 0.0 and summary.overhead_share == 1.0


def test_calls_in_flight_stay_within_the_bound_and_the_backend_limit(
    knowledge: Path, tmp_path: Path
) -> None:
    wide = ScriptedLLM(responder=responder, delay=0.02)
    run(config(knowledge, tmp_path, strategies=["direct"], concurrency=3), wide)
    assert wide.max_in_flight == 3
    serial = ScriptedLLM(responder=responder, delay=0.02)
    serial.max_parallel = 1  # type: ignore[attr-defined]  # like the in-process llama.cpp model
    out = tmp_path / "serial"
    run(config(knowledge, tmp_path, strategies=["direct"], concurrency=3, out=out), serial)
    assert serial.max_in_flight == 1


def test_timings_and_manifest_are_recorded(knowledge: Path, tmp_path: Path) -> None:
    slow = ScriptedLLM(responder=responder, delay=0.05)
    summary = run(config(knowledge, tmp_path, strategies=["direct"], concurrency=1), slow)
    assert summary.llm_seconds >= 6 * 0.05
    assert summary.wall_seconds >= summary.llm_seconds
    share = (summary.wall_seconds - summary.llm_seconds) / summary.wall_seconds
    assert summary.overhead_share == pytest.approx(share)
    manifest = RunManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    assert manifest.sets[0].sha256 == read_knowledge(knowledge).sha256
    assert (manifest.sets[0].n_pairs, manifest.n_inputs, manifest.embedder["name"]) == (
        6,
        6,
        "keywords",
    )
    assert manifest.prompts == {"bench-system-conservative": 1}
    assert manifest.config["strategies"] == ["direct"]


def test_inputs_are_stable_and_their_ids_follow_what_defines_the_call(
    knowledge: Path, tmp_path: Path
) -> None:
    cfg = config(knowledge, tmp_path, strategies=["rag"])
    run(cfg, ScriptedLLM(responder=responder))
    ids = [i.id for i in RunDir(tmp_path / "run").inputs()]
    run(cfg.model_copy(update={"out": tmp_path / "again"}), ScriptedLLM(responder=responder))
    assert [i.id for i in RunDir(tmp_path / "again").inputs()] == ids
    warmer = cfg.model_copy(
        update={"out": tmp_path / "warm", "params": GenerationParams(temperature=0.5)}
    )
    run(warmer, ScriptedLLM(responder=responder))
    assert set(ids).isdisjoint(i.id for i in RunDir(tmp_path / "warm").inputs())


def test_limit_asks_a_seeded_sample_and_keeps_the_whole_knowledge(
    knowledge: Path, tmp_path: Path
) -> None:
    summary = run(
        config(knowledge, tmp_path, strategies=["long_context"], limit=2),
        ScriptedLLM(responder=responder),
    )
    inputs = RunDir(tmp_path / "run").inputs()
    assert summary.items == 2 and all(len(i.context) == 5 for i in inputs)
    probes = leave_one_out_probes(read_knowledge(knowledge).pairs)
    small, large = sample_probes(probes, 2, seed=0), sample_probes(probes, 4, seed=0)
    assert [i.qa_id for i in inputs] == [p.qa_id for p in small]
    assert {p.qa_id for p in small} <= {p.qa_id for p in large}
    assert sample_probes(probes, 2, seed=1) != small or len(probes) <= 2


def test_pairs_from_the_same_fact_are_left_out_together(tmp_path: Path) -> None:
    data = qa_set("facts", PAIRS[:4], fmt="filtered")
    for record, fact in zip(data["kept"], ["f1", "f1", "f2", None], strict=True):
        record["fact_id"] = fact
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    run(config(path, tmp_path, strategies=["long_context"]), ScriptedLLM(responder=responder))
    context = {i.qa_id: [c.qa_id for c in i.context] for i in RunDir(tmp_path / "run").inputs()}
    assert context == {"a": ["c", "d"], "b": ["c", "d"], "c": ["a", "b", "d"], "d": ["a", "b", "c"]}


def test_bad_knowledge_files_are_input_errors(knowledge: Path, tmp_path: Path) -> None:
    cases = {
        "empty.json": {**qa_set("empty", []), "pairs": []},
        "facts.json": {"format": "ragbound.bench.facts/1", "documents": [], "facts": []},
        "twice.json": qa_set("twice", [PAIRS[0], PAIRS[0]]),
        "nameless.json": {"format": "ragbound.bench.qa/1", "pairs": []},
    }
    messages = {
        "empty.json": "holds no QA pairs",
        "facts.json": "is not a QA set",
        "twice.json": "ids repeat",
        "nameless.json": "not a valid",
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(InputError, match=messages[name]) as caught:
            run(config(path, tmp_path), ScriptedLLM())
        assert name in str(caught.value)
    same_name = tmp_path / "copy.json"
    same_name.write_text(knowledge.read_text(), encoding="utf-8")
    with pytest.raises(InputError, match=r"knowledge\[1\].*set name 'mixed' repeats"):
        run(
            config(knowledge, tmp_path).model_copy(update={"knowledge": [knowledge, same_name]}),
            ScriptedLLM(),
        )


def test_random_synthetic_asks_new_questions_with_the_whole_set_as_context(
    knowledge: Path, tmp_path: Path
) -> None:
    shown: list[str] = []

    def writer(messages: list[ChatMessage], params: GenerationParams) -> str:
        if system_of(messages).startswith("You will be given questions in a cluster"):
            shown.append(messages[-1].content)
            n = len(shown)
            copy = PAIRS[0][1].upper()  # a set question, differently cased: dropped
            new = f"What is new thing number {n}?"
            return json.dumps({"questions": [copy, new, new.lower(), f"Who made thing {n}?"]})
        return responder(messages, params)

    cfg = config(
        knowledge,
        tmp_path,
        mode="random_synthetic",
        n_questions=3,
        questions_per_cluster=2,
        strategies=["long_context", "rag"],
    )
    summary = run(cfg, ScriptedLLM(responder=writer))
    assert len(shown) == 2  # ceil(3 / 2) clusters
    assert sorted(
        line for text in shown for line in text.splitlines() if line.startswith("- ")
    ) == sorted(f"- {p[1]}" for p in PAIRS)
    inputs = RunDir(tmp_path / "run").inputs()
    questions = sorted({i.question for i in inputs})
    assert questions == sorted(
        ["What is new thing number 1?", "What is new thing number 2?", "Who made thing 1?"]
    )
    assert summary.items == 6
    assert all(i.mode == "random_synthetic" and i.expected_answer is None for i in inputs)
    assert all(i.qa_id.startswith("syn-") for i in inputs)
    assert all(len(i.context) == 6 for i in inputs if i.strategy == "long_context")


def test_cli_runs_and_resumes_a_yaml_config(
    monkeypatch, capsys, knowledge: Path, tmp_path: Path
) -> None:
    import ragbound.bench.config as config_module
    import ragbound.bench.experiment as experiment_module

    monkeypatch.setattr(
        config_module, "make_llm", lambda spec, **kw: ScriptedLLM(responder=responder)
    )
    monkeypatch.setattr(experiment_module, "load_dense_embedder", lambda spec: KeywordEmbedder())
    path = tmp_path / "bench.yaml"
    path.write_text(
        f"knowledge: [{knowledge.name}]\nmodels: [local]\nstrategies: [direct, rag]\ncache: false\n"
    )
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "run", str(path), "--limit", "4", "--json"
    )
    assert code == 0, err
    first = json.loads(out)
    assert (first["items"], first["done"], first["skipped"]) == (8, 8, 0)
    assert first["run_dir"] == str(tmp_path / "bench-run")
    code, out, err = run_cli(monkeypatch, capsys, "bench", "run", str(path))
    assert code == 0, err
    assert "12 items: 4 done, 8 resumed, 0 failed" in out


def test_cli_reports_a_bad_config_in_one_line(
    monkeypatch, capsys, knowledge: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        f'knowledge = ["{knowledge.name}"]\nmodels = ["local"]\nstrategies = ["hyde", "bm25"]\n'
    )
    code, _, err = run_cli(monkeypatch, capsys, "bench", "run", str(path))
    assert code == 2
    assert err.startswith("error: ") and "strategies[1]: unknown value 'bm25'" in err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def minilm():
    from ragbound.embedders import load_dense_embedder

    return load_dense_embedder("minilm")


def test_rag_with_the_bundled_embedder_finds_the_related_pairs(
    minilm, knowledge: Path, tmp_path: Path
) -> None:
    cfg = config(knowledge, tmp_path, strategies=["rag"], k=2)
    run_experiment(cfg, llms={"local": ScriptedLLM(responder=responder)}, embedder=minilm)
    rag = by(RunDir(tmp_path / "run").inputs(), "rag")
    assert {c.qa_id for c in rag["a"].context} == {"b", "c"}  # the other two bee pairs
    assert all(qa_id not in {c.qa_id for c in item.context} for qa_id, item in rag.items())
    similarities = [c.similarity for c in rag["a"].context]
    assert similarities == sorted(similarities, reverse=True)


def test_an_unusable_model_fails_before_anything_is_written(
    monkeypatch, knowledge: Path, tmp_path: Path
) -> None:
    from ragbound.llm import LLMError

    for name in ("RAGBOUND_LLM_BASE_URL", "OPENAI_BASE_URL", "RAGBOUND_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    cfg = config(knowledge, tmp_path, models=["openai"])
    with pytest.raises(LLMError, match="base_url"):
        run_experiment(cfg, embedder=KeywordEmbedder())
    assert not (tmp_path / "run").exists()


def test_a_damaged_run_manifest_is_refused(knowledge: Path, tmp_path: Path) -> None:
    from ragbound.errors import ArtifactError

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text('{"format": "something/else"}')
    with pytest.raises(ArtifactError, match="something/else"):
        run(config(knowledge, tmp_path), ScriptedLLM(responder=responder))


def test_run_experiment_refuses_to_block_a_running_event_loop(
    knowledge: Path, tmp_path: Path
) -> None:
    import asyncio

    async def inside() -> None:
        run(config(knowledge, tmp_path), ScriptedLLM(responder=responder))

    with pytest.raises(InputError, match=r"asyncio\.to_thread"):
        asyncio.run(inside())
