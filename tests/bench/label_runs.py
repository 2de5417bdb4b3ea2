"""Hand-written run directories for the evaluation and labelling tests (tests only)."""

from __future__ import annotations

from pathlib import Path

from ragbound.bench import ContextItem, ExperimentInput, ExperimentOutput, Provenance, RunDir

PROVENANCE = Provenance(created_at="2025-01-01T00:00:00+00:00", model="target")
ABSTAINING = "I don't know. No citation."
QUESTIONS = [
    (
        "How long is a passport valid?",
        "Ten years for adults.",
        "Adult passports last 10 years [2].",
    ),
    ("What is the CPF interest floor?", "Four percent.", ABSTAINING),
    ("Who issues road tax discs?", "The Land Transport Authority.", "The police do [1]."),
    ("When is MediShield premium due?", "On your birthday each year.", ABSTAINING),
    ("How fast may a learner drive?", "At most 70 km/h.", "Learners may drive at 70 km/h [3]."),
    ("Where is a long-term pass renewed?", "Online at the ICA portal.", "At the ICA portal."),
]


def experiment_input(
    number: int,
    model: str = "m1",
    strategy: str = "rag",
    system_prompt: str = "basic",
    expected: bool = True,
) -> ExperimentInput:
    question, answer, _ = QUESTIONS[number % len(QUESTIONS)]
    context = [
        ContextItem(number=1, qa_id="qa-x", text="Road tax is paid online. " * 40, similarity=0.2),
        ContextItem(number=2, qa_id="qa-y", text="Passports are renewed online.", similarity=0.6),
    ]
    return ExperimentInput(
        id=f"in-{model}-{strategy}-{system_prompt}-{number}",
        mode="leave_one_out" if expected else "random_synthetic",
        qa_id=f"qa-{number}",
        question=question,
        expected_answer=answer if expected else None,
        model=model,
        strategy=strategy,  # type: ignore[arg-type]
        system_prompt=system_prompt,
        prompt_version=1,
        context=context,
    )


def model_answer(item: ExperimentInput) -> str:
    """The hand-written answer of the question the input asks."""
    return next(reply for question, _, reply in QUESTIONS if question == item.question)


def write_run(
    root: Path,
    strata: dict[tuple[str, str, str], int] | None = None,
    *,
    failed: int = 1,
    synthetic: int = 0,
) -> RunDir:
    """A run whose inputs are spread over ``strata`` (model, strategy, prompt) -> count.

    The first ``failed`` inputs get an error output instead of an answer; ``synthetic``
    extra random-synthetic inputs (no expected answer) are answered too.
    """
    strata = strata or {("m1", "rag", "basic"): 4, ("m2", "direct", "conservative"): 3}
    inputs = [
        experiment_input(number, *key) for key, count in strata.items() for number in range(count)
    ]
    inputs += [experiment_input(100 + n, expected=False) for n in range(synthetic)]
    run = RunDir(root)
    run.write_inputs(inputs)
    outputs = [
        ExperimentOutput(input_id=item.id, error="timeout", provenance=PROVENANCE)
        if index < failed
        else ExperimentOutput(input_id=item.id, answer=model_answer(item), provenance=PROVENANCE)
        for index, item in enumerate(inputs)
    ]
    run.outputs().append(outputs)
    return run
