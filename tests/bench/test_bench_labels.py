"""Human labels: stratified sample, terminal labeller (interrupt and resume), agreement."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ragbound.bench import Evaluation, Label, Provenance, RunDir
from ragbound.bench.labels import (
    LabelSession,
    agreement_report,
    allocate,
    choice_keys,
    label_terminal,
    sample_for_labelling,
    trim,
)
from ragbound.errors import ArtifactError, InputError
from tests.bench.label_runs import ABSTAINING, write_run
from tests.cli.runner import run as run_cli

STRATA = {
    ("m1", "rag", "basic"): 12,
    ("m1", "hyde", "basic"): 6,
    ("m2", "rag", "conservative"): 2,
}


def scripted(answers: list[str | BaseException]) -> tuple[Callable[[str], str], list[str]]:
    """An ``ask`` that returns ``answers`` in turn (raising exceptions) and records prompts."""
    prompts: list[str] = []
    queue: Iterator[str | BaseException] = iter(answers)

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        answer = next(queue)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return ask, prompts


def quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def test_allocation_by_hand() -> None:
    assert allocate([50, 30, 20], 10) == [5, 3, 2]
    # quotas 3.75, 2.5, 1.25, 2.5: floors 3, 2, 1, 2 = 8; remainders .75, .5, .25, .5 -> +1, +1
    assert allocate([30, 20, 10, 20], 10) == [4, 3, 1, 2]
    # quotas 9.7, 0.2, 0.1: one each for the small strata, the large one gives back
    assert allocate([97, 2, 1], 10) == [8, 1, 1]
    assert allocate([5, 5, 5], 2) == [1, 1, 1]  # one per stratum beats n
    assert allocate([3, 2], 200) == [3, 2]
    with pytest.raises(InputError, match="at least 1"):
        allocate([3], 0)


@given(st.lists(st.integers(1, 60), min_size=1, max_size=8), st.integers(1, 150))
@settings(max_examples=150, deadline=None)
def test_allocation_properties(sizes: list[int], n: int) -> None:
    counts = allocate(sizes, n)
    assert all(1 <= count <= size for count, size in zip(counts, sizes, strict=True))
    assert sum(counts) == min(sum(sizes), max(n, len(sizes)))


def test_the_sample_is_stratified_saved_and_reused(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", STRATA, failed=1)
    sample = sample_for_labelling(run.root, n=10, seed=3)
    counts = {
        (s.model, s.strategy, s.system_prompt): (s.population, s.sampled) for s in sample.strata
    }
    # 19 answered (one failed in the first stratum): quotas 5.8, 3.2, 1.1 -> 6, 3, 1
    assert counts == {
        ("m1", "hyde", "basic"): (6, 3),
        ("m1", "rag", "basic"): (11, 6),
        ("m2", "rag", "conservative"): (2, 1),
    }
    failed = next(o.input_id for o in run.outputs().read() if o.error)
    assert len(set(sample.input_ids)) == 10 and failed not in sample.input_ids
    on_disk = json.loads(run.sample_path.read_text())
    assert (
        on_disk["format"] == "ragbound.bench.sample/1" and on_disk["input_ids"] == sample.input_ids
    )
    assert sample_for_labelling(run.root, n=3, seed=9) == sample  # reused, whatever n says
    run.sample_path.unlink()
    assert sample_for_labelling(run.root, n=10, seed=3).input_ids == sample.input_ids  # seeded


def test_a_run_without_answers_cannot_be_sampled(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 2}, failed=2)
    with pytest.raises(InputError, match="no answered outputs"):
        sample_for_labelling(run.root)


def test_choice_keys_accept_numbers_names_and_distinct_initials() -> None:
    assert choice_keys(["yes", "no"]) == {
        "1": "yes",
        "2": "no",
        "yes": "yes",
        "no": "no",
        "y": "yes",
        "n": "no",
    }
    tiers = choice_keys(["tier_1", "tier_2", "tier_3"])
    assert tiers["2"] == "tier_2" and tiers["tier_3"] == "tier_3" and "t" not in tiers
    assert trim("word " * 200, 20) == "word word word word …"


def _labels(run: RunDir, annotator: str) -> list[tuple[str, str, str]]:
    return [(x.input_id, x.task, x.value) for x in run.labels(annotator).read()]


def test_terminal_labelling_survives_an_interrupt_and_resumes(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 4}, failed=0)
    session = LabelSession(run.root, n=4)
    order = [item.input_id for item in session.items]
    abstains = [item.answer == ABSTAINING for item in session.items]

    # item 1: a bad key is asked again; an abstention closes the item without factuality
    first = ["maybe", "y"] if abstains[0] else ["maybe", "n", "1"]
    ask, prompts = scripted([*first, KeyboardInterrupt()])
    console = quiet()
    progress = label_terminal(run.root, "ann", n=4, console=console, ask=ask)
    assert progress.interrupted and progress.finished == 1 and progress.given == len(first) - 1
    assert "answer with one of" in console.file.getvalue()
    assert session.items[0].question in console.file.getvalue()
    assert [label[0] for label in _labels(run, "ann")] == [order[0]] * (len(first) - 1)

    # the next session starts at item 2; end of input mid-item keeps what was given
    ask, prompts = scripted(["2", EOFError()])
    progress = label_terminal(run.root, "ann", console=quiet(), ask=ask)
    assert progress.interrupted and prompts[0].startswith("abstention?")
    assert _labels(run, "ann")[-1] == (order[1], "abstention", "no")

    # the last session asks item 2's factuality only, then items 3 and 4
    rest = ["tier_2"] + [answer for a in abstains[2:] for answer in (["yes"] if a else ["no", "3"])]
    ask, prompts = scripted(rest)
    progress = label_terminal(run.root, "ann", console=quiet(), ask=ask)
    assert prompts[0].startswith("factuality?") and not progress.interrupted
    assert progress.finished == progress.total == 4
    given = Counter(input_id for input_id, _, _ in _labels(run, "ann"))
    expected = [1 if abstains[0] else 2, 2] + [1 if a else 2 for a in abstains[2:]]
    assert [given[key] for key in order] == expected
    ask, prompts = scripted([])
    assert label_terminal(run.root, "ann", console=quiet(), ask=ask).given == 0 and not prompts


def test_a_session_refuses_bad_labels(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", failed=0)
    session = LabelSession(run.root, ["abstention"], n=3)
    item = session.items[0].input_id
    with pytest.raises(InputError, match="not one of"):
        session.record("ann", item, {"abstention": "perhaps"})
    with pytest.raises(InputError, match="unknown task 'factuality'"):
        session.record("ann", item, {"factuality": "tier_1"})
    with pytest.raises(InputError, match="not in the label sample"):
        session.record("ann", "in-nope", {"abstention": "yes"})
    with pytest.raises(InputError, match="annotator name"):
        session.record("  ", item, {"abstention": "yes"})
    with pytest.raises(InputError, match="unknown label task"):
        LabelSession(run.root, ["tone"])
    assert session.record("ann", item, {"abstention": " YES "})[0].value == "yes"


PROVENANCE = Provenance(created_at="2025-01-01T00:00:00+00:00")


def _give(run: RunDir, annotator: str, task: str, values: dict[str, str]) -> None:
    run.labels(annotator).append(
        Label(input_id=key, annotator=annotator, task=task, value=value, created_at="t")
        for key, value in values.items()
    )


def _judged(run: RunDir, evaluator: str, values: dict[str, str | None]) -> None:
    run.evaluations("abstention", evaluator).append(
        Evaluation(
            input_id=key,
            spec="abstention",
            evaluator=evaluator,
            outcome=value,
            raw=None if value else "no tag",
            provenance=PROVENANCE,
        )
        for key, value in values.items()
    )


def test_agreement_report_by_hand(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 6}, failed=0)
    ids = [item.id for item in run.inputs()]
    a, b, c, d, e, f = ids
    _give(run, "ann", "abstention", {a: "no", b: "yes", c: "yes", d: "no", e: "no", f: "no"})
    _give(run, "ann", "abstention", {a: "yes"})  # relabelled: the newest label counts
    _give(run, "bob", "abstention", {a: "yes", b: "no", c: "yes", d: "no", e: "yes"})
    _give(run, "cyd", "abstention", {a: "yes", b: "no", c: "yes", d: "no"})
    _give(run, "ann", "factuality", {d: "tier_1", e: "tier_3"})
    _give(run, "bob", "factuality", {d: "tier_1"})
    _judged(run, "judge", {a: "yes", b: "no", c: "no", d: None})

    report = agreement_report(run.root)
    assert report.annotators == ["ann", "bob", "cyd"] and report.tasks == [
        "abstention",
        "factuality",
    ]
    pairs = {(p.task, *p.annotators): p for p in report.pairs}
    # ann vs bob on a-e: yes/yes, yes/no, yes/yes, no/no, no/yes -> observed 3/5;
    # ann says yes 3/5, bob 3/5 -> expected 9/25 + 4/25 = 13/25 -> kappa (15/25 - 13/25) / (12/25)
    ann_bob = pairs[("abstention", "ann", "bob")]
    assert ann_bob.n_items == 5 and ann_bob.observed == pytest.approx(0.6)
    assert ann_bob.kappa == pytest.approx(1 / 6)
    assert pairs[("abstention", "bob", "cyd")].kappa == 1.0  # identical on a-d
    assert pairs[("factuality", "ann", "bob")].n_items == 1

    fleiss = {row.task: row for row in report.fleiss}
    # a-d by all three: counts (yes, no) = (3,0), (1,2), (3,0), (0,3): P-bar = (1+1/3+1+1)/4 = 5/6;
    # shares yes 7/12, no 5/12 -> P-e = 74/144 -> kappa = (5/6 - 74/144) / (70/144) = 46/70
    assert fleiss["abstention"].n_items == 4
    assert fleiss["abstention"].kappa == pytest.approx(46 / 70)

    disputed = {(row.input_id, row.task): row.labels for row in report.disagreements}
    assert set(disputed) == {(b, "abstention"), (e, "abstention")}
    assert disputed[(e, "abstention")] == {"ann": "no", "bob": "yes"}

    (judge,) = report.evaluators
    # majorities: a yes, b no (2 of 3), c yes, d no, e tied, f no (ann alone)
    # judge: a yes (right), b no (right), c no (wrong), d failed, e unresolved, f not judged
    assert judge.task == "abstention" and judge.outcomes == ["yes", "no"]
    assert judge.unresolved == [e] and judge.evaluator_failed == 1 and judge.not_evaluated == 1
    assert judge.confusion == [[1, 1], [0, 1]] and judge.n_items == 3
    assert judge.accuracy == pytest.approx(2 / 3)
    # truth yes 2/3, judge yes 1/3 -> expected 2/9 + 2/9 = 4/9; observed 6/9 -> kappa 2/5
    assert judge.kappa == pytest.approx(0.4)


def test_agreement_needs_labels(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    with pytest.raises(ArtifactError, match="no labels yet"):
        agreement_report(run.root)


def test_cli_label_and_agreement(monkeypatch, capsys, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 2}, failed=0)
    session = LabelSession(run.root, ["abstention"], n=2)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\nn\n"))
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "bench",
        "label",
        str(run.root),
        "--annotator",
        "ann",
        "--task",
        "abstention",
    )
    assert code == 0, err
    assert "ann: 2 of 2 items finished" in out
    first, second = (item.input_id for item in session.items)
    assert _labels(run, "ann") == [(first, "abstention", "yes"), (second, "abstention", "no")]

    _give(run, "bob", "abstention", {first: "yes", second: "yes"})
    code, out, err = run_cli(monkeypatch, capsys, "bench", "agreement", str(run.root), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["pairs"][0]["n_items"] == 2 and len(report["disagreements"]) == 1
    code, out, err = run_cli(monkeypatch, capsys, "bench", "agreement", str(run.root))
    assert code == 0, err
    assert "Cohen" in out and "1 disagreement(s) to adjudicate" in out
