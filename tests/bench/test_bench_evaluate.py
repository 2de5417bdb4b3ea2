"""Evaluation: built-in and custom specs, tag extraction, no guessing, resume, several models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.bench import EvaluationSpec, RunDir
from ragbound.bench.evaluate import (
    BUILTIN_SPECS,
    evaluate_run,
    inline_prompt,
    latest_evaluations,
    load_specs,
    reasoning_outside,
    resolve_specs,
    spec_prompt,
)
from ragbound.errors import InputError
from ragbound.llm import ChatMessage, GenerationParams, LLMTimeoutError
from tests.bench.label_runs import ABSTAINING, write_run
from tests.cli.runner import run as run_cli
from tests.llm.llm_fakes import ScriptedLLM


def judge(messages: list[ChatMessage], params: GenerationParams) -> str:
    """A well-behaved evaluator: abstention from the answer text, tier_1 for every answer."""
    system, user = messages[0].content, messages[-1].content
    if "expert data labeller" in system:
        verdict = "YES" if ABSTAINING in user else "no"  # case differs from the allowed outcome
        return f"The model {'declines' if verdict == 'YES' else 'answers'}.\n<abstention>{verdict}</abstention>"
    if "classifying the quality" in system:
        return "Same facts as expected. <factuality>tier_1</factuality> Done."
    return "Looks fine. <grade>pass</grade>"


def test_builtin_specs_judge_every_answered_output(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", failed=1, synthetic=1)
    llm = ScriptedLLM(responder=judge, model_id="judge-a")
    summary = evaluate_run(run.root, llm, ["abstention", "factuality"], skip_abstained=False)

    abstention = {e.input_id: e for e in run.evaluations("abstention", "judge-a").read()}
    factuality = {e.input_id: e for e in run.evaluations("factuality", "judge-a").read()}
    answered = {o.input_id for o in run.outputs().read() if o.error is None}
    synthetic = {i.id for i in run.inputs() if i.expected_answer is None}
    assert set(abstention) == answered  # the failed output is never judged
    assert set(factuality) == answered - synthetic  # no expected answer: nothing to compare
    assert {e.outcome for e in abstention.values()} == {"yes", "no"}  # canonical spelling
    first = next(iter(factuality.values()))
    assert first.outcome == "tier_1" and first.reasoning == "Same facts as expected.  Done."
    assert first.provenance.prompt_id == "bench-eval-factuality" and first.evaluator == "judge-a"
    by_spec = {s.spec: s for s in summary.specs}
    assert summary.n_output_errors == 1 and by_spec["factuality"].n_skipped == 1
    assert by_spec["abstention"].outcomes == {"yes": 3, "no": 4}
    assert (
        by_spec["abstention"].n_evaluated == len(answered) and by_spec["abstention"].n_failed == 0
    )


def test_factuality_skips_what_the_same_evaluator_called_an_abstention(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", failed=1, synthetic=1)
    llm = ScriptedLLM(responder=judge, model_id="judge-a")
    summary = evaluate_run(run.root, llm, ["factuality", "abstention"])

    abstention = {e.input_id: e.outcome for e in run.evaluations("abstention", "judge-a").read()}
    factuality = {e.input_id for e in run.evaluations("factuality", "judge-a").read()}
    synthetic = {i.id for i in run.inputs() if i.expected_answer is None}
    answered_not_abstained = {key for key, outcome in abstention.items() if outcome == "no"}
    assert factuality == answered_not_abstained - synthetic
    by_spec = {s.spec: s for s in summary.specs}
    assert by_spec["factuality"].n_abstained == 3 and by_spec["abstention"].n_abstained == 0
    assert len(llm.calls) == len(abstention) + len(factuality)  # nothing judged twice
    # another evaluator's abstention verdicts do not excuse this one from judging
    other = ScriptedLLM(responder=judge, model_id="judge-b")
    evaluate_run(run.root, other, ["factuality"])
    assert len(run.evaluations("factuality", "judge-b").read()) == len(abstention) - len(synthetic)


def test_the_evaluator_sees_question_expected_and_model_answer(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 1}, failed=0)
    llm = ScriptedLLM(responder=judge)
    evaluate_run(run.root, llm, ["abstention", "factuality"], concurrency=1)
    factuality_user = llm.calls[1][0][-1].content
    assert "Question: How long is a passport valid?" in factuality_user
    assert "Expected Answer: Ten years for adults." in factuality_user
    assert "Model Answer: Adult passports last 10 years [2]." in factuality_user
    assert "Expected" not in llm.calls[0][0][-1].content  # abstention needs no expected answer


def test_a_reply_outside_the_outcomes_is_retried_then_recorded_never_guessed(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 2}, failed=0)
    llm = ScriptedLLM(responder=lambda m, p: "Hard to say. <abstention>maybe</abstention>")
    summary = evaluate_run(run.root, llm, ["abstention"], concurrency=1)
    assert len(llm.calls) == 2 * 3  # one call and two retries per output
    assert llm.calls[1][1].temperature > 0  # a retry is not the same greedy call again
    records = run.evaluations("abstention", "fake:scripted").read()
    assert [r.outcome for r in records] == [None, None]
    assert "'maybe'" in (records[0].error or "") and records[0].raw == (
        "Hard to say. <abstention>maybe</abstention>"
    )
    assert summary.specs[0].n_failed == 2 and summary.specs[0].n_unresolved == 2

    # a rerun repeats nothing: the reply held no outcome and would again
    evaluate_run(run.root, ScriptedLLM(), ["abstention"])
    assert len(run.evaluations("abstention", "fake:scripted").read()) == 2


def test_a_rerun_resumes_and_retries_only_failed_calls(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 3}, failed=0)
    flaky = ScriptedLLM(
        ["<abstention>no</abstention>", LLMTimeoutError("server down")],
        responder=judge,
    )
    first = evaluate_run(run.root, flaky, ["abstention"], concurrency=1)
    assert first.specs[0].n_failed == 1
    log = run.evaluations("abstention", "fake:scripted")
    failed = [r for r in log.read() if r.outcome is None]
    assert failed[0].raw is None and "server down" in (failed[0].error or "")

    again = ScriptedLLM(responder=judge)
    second = evaluate_run(run.root, again, ["abstention"])
    assert len(again.calls) == 1  # only the failed call is made again
    assert second.specs[0].n_done_before == 2 and second.specs[0].n_unresolved == 0
    latest = latest_evaluations(run.root)[("abstention", "fake:scripted")]
    assert all(record.outcome is not None for record in latest.values())


def test_judgements_are_appended_as_they_finish(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 4}, failed=0)
    crash = ScriptedLLM(["<abstention>no</abstention>"] * 2 + [KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        evaluate_run(run.root, crash, ["abstention"], concurrency=1)
    assert len(run.evaluations("abstention", "fake:scripted").read()) == 2  # kept on disk
    resumed = ScriptedLLM(responder=judge)
    evaluate_run(run.root, resumed, ["abstention"])
    assert len(resumed.calls) == 2
    assert len(run.evaluations("abstention", "fake:scripted").read()) == 4


def test_several_evaluators_write_their_own_logs(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", failed=0)
    for name in ("openai:gpt-4.1", "local:qwen.gguf"):
        evaluate_run(run.root, ScriptedLLM(responder=judge, model_id=name), ["abstention"])
    names = sorted(log.path.name for log in run.evaluation_logs())
    assert names == ["abstention--local_qwen.gguf.jsonl", "abstention--openai_gpt-4.1.jsonl"]
    assert sorted(latest_evaluations(run.root)) == [
        ("abstention", "local:qwen.gguf"),
        ("abstention", "openai:gpt-4.1"),
    ]


def test_reasoning_keeps_everything_outside_the_tag() -> None:
    reply = "First <verdict>yes</verdict> then < Verdict >no</verdict> end"
    assert reasoning_outside(reply, "verdict") == "First  then  end"


def test_inline_custom_spec_uses_the_fixed_template(tmp_path: Path) -> None:
    spec = EvaluationSpec(
        name="Politeness check",
        prompt="Grade whether the answer is polite. Braces {like this} are plain text.",
        outcomes=["pass", "fail"],
        tag="grade",
    )
    prompt = inline_prompt(spec)
    assert prompt.id == "bench-eval-custom-politeness_check"
    system, user = prompt.render(question="Q?", expected_answer="E.", model_answer="A.")
    assert system.content.endswith("{like this} are plain text.")
    assert "Question:\nQ?" in user.content and "Expected answer:\nE." in user.content
    assert "<grade>OUTCOME</grade>" in user.content and "one of: pass, fail" in user.content

    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 2}, failed=0)
    summary = evaluate_run(run.root, ScriptedLLM(responder=judge), [spec])
    assert summary.specs[0].outcomes == {"pass": 2}
    assert run.evaluations("Politeness check", "fake:scripted").path.name == (
        "Politeness_check--fake_scripted.jsonl"
    )


SPEC_TOML = """
[[specs]]
name = "grounded"
prompt = "Is every claim of the model answer supported by the expected answer?"
outcomes = ["Supported", "Unsupported"]
tag = "grounded"
version = 2
"""


def test_spec_files_in_toml_yaml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "specs.toml"
    toml.write_text(SPEC_TOML)
    yaml_file = tmp_path / "specs.yaml"
    yaml_file.write_text(
        "specs:\n  - name: grounded\n    prompt: Is every claim supported?\n"
        "    outcomes: [Supported, Unsupported]\n    tag: grounded\n"
    )
    json_file = tmp_path / "specs.json"
    json_file.write_text(
        json.dumps({"specs": [{**BUILTIN_SPECS["abstention"].model_dump(), "name": "abst2"}]})
    )
    assert load_specs(toml)[0].version == 2
    assert load_specs(yaml_file)[0].outcomes == ["Supported", "Unsupported"]
    custom = load_specs(json_file)
    assert spec_prompt(custom[0]).id == "bench-eval-abstention"  # a prompt id, not inline text
    assert [s.name for s in resolve_specs([], custom)] == ["abst2"]
    assert [s.name for s in resolve_specs(["factuality", "abst2"], custom)] == [
        "factuality",
        "abst2",
    ]
    assert [s.name for s in resolve_specs()] == ["abstention", "factuality"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[specs]]\nname = "x"\nprompt = "Judge it."\ntag = "x"\n', r"specs\[0\].*outcomes"),
        ('[[specs]]\nname = "x"\nprompt = "Judge."\noutcomes = ["a", "A"]\ntag = "x"\n', "repeat"),
        ('[[specs]]\nname = "x"\nprompt = "Judge."\noutcomes = ["a", "b"]\ntag = "<x>"\n', "tag"),
        (
            '[[specs]]\nname = "abstention"\nprompt = "J."\noutcomes = ["a", "b"]\ntag = "x"\n',
            "built in",
        ),
        (
            '[[specs]]\nname = "x"\nprompt = "J."\noutcomes = ["a", "b"]\ntag = "x"\ntags = 1\n',
            "unknown setting 'tags'",
        ),
        ("title = 'no specs here'\n", "list of specs"),
    ],
)
def test_bad_spec_files_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "specs.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as caught:
        load_specs(path)
    assert "specs.toml" in str(caught.value)


def test_bad_specs_are_refused_before_any_call(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    llm = ScriptedLLM()
    with pytest.raises(InputError, match="unknown evaluation spec 'tone'"):
        evaluate_run(run.root, llm, ["tone"])
    wrong_tag = EvaluationSpec(
        name="a", prompt="bench-eval-abstention", outcomes=["yes", "no"], tag="verdict"
    )
    with pytest.raises(InputError, match="never asks for <verdict>"):
        evaluate_run(run.root, llm, [wrong_tag])
    with pytest.raises(InputError, match="unknown prompt 'no-such-prompt'"):
        spec_prompt(wrong_tag.model_copy(update={"prompt": "no-such-prompt"}))
    with pytest.raises(InputError, match="uses variables"):
        spec_prompt(wrong_tag.model_copy(update={"prompt": "moderation-judge", "tag": "verdict"}))
    with pytest.raises(InputError, match="repeat"):
        evaluate_run(run.root, llm, ["abstention", "abstention"])
    with pytest.raises(InputError, match="concurrency"):
        evaluate_run(run.root, llm, ["abstention"], concurrency=0)
    # refused before anything is read: a missing run folder or no specs do not hide it
    with pytest.raises(InputError, match="concurrency"):
        evaluate_run(run.root / "missing", llm, [], concurrency=0)
    assert llm.calls == []
    with pytest.raises(InputError, match="unknown evaluation spec"):
        resolve_specs(["nope"])


def test_cli_evaluate_with_a_spec_file(monkeypatch, capsys, tmp_path: Path) -> None:
    import ragbound.llm

    run = write_run(tmp_path / "run", failed=1)
    specs = tmp_path / "specs.toml"
    specs.write_text(
        '[[specs]]\nname = "grounded"\nprompt = "Is it grounded?"\n'
        'outcomes = ["pass", "fail"]\ntag = "grade"\n'
    )
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        ragbound.llm, "make_llm", lambda spec, **kw: ScriptedLLM(responder=judge, model_id=spec)
    )
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "bench",
        "evaluate",
        str(run.root),
        "--llm",
        "judge-x",
        "--spec",
        "abstention",
        "--spec-file",
        str(specs),
        "--spec",
        "grounded",
        "--json",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["evaluator"] == "judge-x" and summary["n_output_errors"] == 1
    assert {s["spec"]: s["outcomes"] for s in summary["specs"]} == {
        "abstention": {"yes": 3, "no": 3},
        "grounded": {"pass": 6},
    }
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "evaluate", str(run.root), "--llm", "judge-x"
    )
    assert code == 0, err
    assert "judged by judge-x" in out and "abstention" in out and "factuality" in out
    assert isinstance(RunDir(run.root).evaluations("factuality", "judge-x").read()[0].outcome, str)


def test_cli_factuality_on_abstentions_judges_every_answer(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    import ragbound.llm

    run = write_run(tmp_path / "run", failed=0)
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        ragbound.llm, "make_llm", lambda spec, **kw: ScriptedLLM(responder=judge, model_id=spec)
    )
    args = ("bench", "evaluate", str(run.root), "--json")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--llm", "judge-a")
    assert code == 0, err
    skipped = {s["spec"]: s["n_abstained"] for s in json.loads(out)["specs"]}
    assert skipped == {"abstention": 0, "factuality": 3}
    code, out, err = run_cli(
        monkeypatch, capsys, *args, "--llm", "judge-b", "--factuality-on-abstentions"
    )
    assert code == 0, err
    factuality = next(s for s in json.loads(out)["specs"] if s["spec"] == "factuality")
    assert factuality["n_abstained"] == 0 and factuality["n_evaluated"] == 7
