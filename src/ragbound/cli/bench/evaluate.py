"""``ragbound bench evaluate | label | agreement``: evaluator LLMs and human labels."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ragbound.cli import validate
from ragbound.cli.common import cached_llm, console, emit_json, progress, shown
from ragbound.cli.options import LLM_HELP, JsonOpt

RunArg = Annotated[Path, typer.Argument(help="Benchmark run directory.")]
SpecFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec-file",
        help="Custom evaluation specs (.toml/.yaml/.json, a 'specs' list).",
        callback=validate.existing_file,
    ),
]


def _specs(names: list[str] | None, spec_file: Path | None) -> list[Any]:
    from ragbound.bench.evaluate import load_specs, resolve_specs

    custom = load_specs(spec_file) if spec_file is not None else []
    return resolve_specs(names or (), custom)


def evaluate(
    run_dir: RunArg,
    llm: Annotated[
        list[str] | None,
        typer.Option("--llm", help=f"Evaluator model (repeat for several): {LLM_HELP}"),
    ] = None,
    spec: Annotated[
        list[str] | None,
        typer.Option(
            "--spec", help="Spec to run (repeat): abstention, factuality or a --spec-file name."
        ),
    ] = None,
    spec_file: SpecFileOpt = None,
    concurrency: Annotated[
        int, typer.Option(help="Evaluator calls in flight.", callback=validate.positive_int)
    ] = 4,
    max_tokens: Annotated[
        int, typer.Option(help="Reply length cap, tokens.", callback=validate.at_least(16))
    ] = 320,
    factuality_on_abstentions: Annotated[
        bool,
        typer.Option(
            "--factuality-on-abstentions",
            help="Also judge the factuality of answers the evaluator called abstentions "
            "(default: skipped, the factuality rate counts non-abstentions only).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Judge every answered output with evaluator LLMs; resumes, replies are cached.

    The built-in specs are abstention (yes or no) and factuality (tier_1, tier_2 or tier_3);
    --spec-file adds your own (given without --spec, only its specs run). The evaluator sees the
    question, the expected answer and the model's answer. A reply without an allowed outcome is
    retried, then recorded without one: never guessed. Several --llm are run one after another
    on the same outputs. Factuality is judged only for answers the same evaluator did not call
    abstentions, unless --factuality-on-abstentions.

    Each spec and evaluator has its own log, evaluations/SPEC--EVALUATOR.jsonl, appended as
    each judgement finishes; a rerun skips what is judged. --json prints one object per
    evaluator: run_dir, evaluator, n_outputs, n_output_errors and specs (counts per spec).
    """
    from ragbound.bench.evaluate import EVAL_PARAMS, evaluate_run

    specs = _specs(spec, spec_file)
    params = EVAL_PARAMS.model_copy(update={"max_tokens": max_tokens})
    for name in dict.fromkeys(llm or ["local"]):
        summary = evaluate_run(
            run_dir,
            cached_llm(name),
            specs,
            params=params,
            concurrency=concurrency,
            progress=progress(json_out),
            skip_abstained=not factuality_on_abstentions,
        )
        if json_out:
            emit_json(summary)
        else:
            console().print(_summary_table(summary))


def _summary_table(summary: Any) -> Any:
    from rich.table import Table

    table = Table(
        title=f"judged by {summary.evaluator}: {summary.n_outputs} outputs, "
        f"{summary.n_output_errors} errors (not judged)"
    )
    for column in ("spec", "outcomes", "new", "before", "failed", "skipped", "log"):
        table.add_column(
            column, justify="left" if column in ("spec", "outcomes", "log") else "right"
        )
    for row in summary.specs:
        outcomes = ", ".join(f"{name} {count}" for name, count in row.outcomes.items()) or "-"
        if row.n_unresolved:
            outcomes += f", no outcome {row.n_unresolved}"
        table.add_row(
            row.spec,
            outcomes,
            str(row.n_evaluated),
            str(row.n_done_before),
            str(row.n_failed),
            str(row.n_skipped + row.n_abstained),
            row.log,
        )
    return table


def label(
    run_dir: RunArg,
    annotator: Annotated[
        str,
        typer.Option(
            help="Your name: labels go to labels/NAME.jsonl.", callback=validate.non_empty
        ),
    ],
    n: Annotated[
        int,
        typer.Option(
            "--n", help="Sample size (first session only).", callback=validate.positive_int
        ),
    ] = 200,
    seed: Annotated[
        int, typer.Option(help="Sampling seed (first session only).", callback=validate.seed)
    ] = 0,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", help="Task to label (repeat; default abstention, factuality)."),
    ] = None,
    spec_file: SpecFileOpt = None,
    web: Annotated[bool, typer.Option("--web", help="Label in the browser instead.")] = False,
    port: Annotated[
        int, typer.Option(help="Port of the --web page (0: any free).", callback=validate.port)
    ] = 8765,
) -> None:
    """Label a stratified sample of outputs, in the terminal or a local web page; resumes.

    The sample is stratified by model x strategy x system prompt, drawn once with --seed
    and --n and kept for later sessions. Each label is saved to labels/ANNOTATOR.jsonl as it
    is given, so an interrupted session loses nothing and the next one resumes; labelling an
    item again replaces the earlier label. Factuality is asked only for answers labelled as
    not abstaining.
    """
    tasks = _specs(task, spec_file)
    if web:
        _serve(run_dir, annotator, tasks, n, seed, port)
        return
    from ragbound.bench.labels import label_terminal

    done = label_terminal(run_dir, annotator, tasks, n=n, seed=seed)
    console().print(
        f"{done.annotator}: {done.finished} of {done.total} items finished, "
        f"{done.given} label(s) given now"
        + (" (stopped; rerun to resume)" if done.finished < done.total else "")
    )


def _serve(run_dir: Path, annotator: str, tasks: list[Any], n: int, seed: int, port: int) -> None:
    from urllib.parse import quote

    from ragbound.bench.label_web import serve_labeller

    server = serve_labeller(run_dir, port, tasks=tasks, n=n, seed=seed)
    out = console()
    out.print(f"labelling page: {server.url}?annotator={quote(annotator)}  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out.print("stopped; every saved label is in labels/")
    finally:
        server.server_close()


def agreement(run_dir: RunArg, json_out: JsonOpt = False) -> None:
    """Kappas between annotators, disagreements to adjudicate, evaluators vs humans.

    Per task: Cohen's kappa for each pair of annotators, Fleiss' kappa over all of them,
    the items they disagree on, and each evaluator model against the human majority
    (accuracy, kappa, confusion matrix; ties are left unresolved). The newest label per
    annotator, item and task counts. --json prints annotators, tasks, n_labels, pairs,
    fleiss, disagreements and evaluators.
    """
    from ragbound.bench.labels import agreement_report

    report = agreement_report(run_dir)
    if json_out:
        emit_json(report)
        return
    out = console()
    out.print(_kappa_table(report))
    for row in report.evaluators:
        out.print(_confusion_table(row))
    if report.disagreements:
        out.print(_disagreement_table(report))


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _kappa_table(report: Any) -> Any:
    from rich.table import Table

    table = Table(title=f"agreement between annotators ({report.n_labels} labels)")
    for column in ("task", "annotators", "items", "agreement", "kappa"):
        table.add_column(column, justify="right" if column in ("items", "agreement") else "left")
    for pair in report.pairs:
        table.add_row(
            pair.task,
            " vs ".join(pair.annotators),
            str(pair.n_items),
            _number(pair.observed),
            f"Cohen {_number(pair.kappa)}",
        )
    for row in report.fleiss:
        table.add_row(
            row.task,
            "all: " + ", ".join(row.annotators),
            str(row.n_items),
            "",
            f"Fleiss {_number(row.kappa)}",
        )
    if not report.pairs:
        table.caption = "one annotator so far: no kappa between annotators"
    return table


def _confusion_table(row: Any) -> Any:
    from rich.table import Table

    table = Table(title=f"{row.task}: {row.evaluator} vs human majority", min_width=60)
    table.add_column("human \\ model")
    for outcome in row.outcomes:
        table.add_column(outcome, justify="right")
    for outcome, counts in zip(row.outcomes, row.confusion, strict=True):
        table.add_row(outcome, *(str(count) for count in counts))
    notes = [
        f"{row.n_items} items, accuracy {_number(row.accuracy)}, kappa {_number(row.kappa)}",
        f"{len(row.unresolved)} tied (unresolved)" if row.unresolved else "",
        f"{row.not_evaluated} not judged by the model" if row.not_evaluated else "",
        f"{row.evaluator_failed} without a model outcome" if row.evaluator_failed else "",
    ]
    table.caption = "\n".join(note for note in notes if note)
    return table


def _disagreement_table(report: Any) -> Any:
    from rich.table import Table

    table = Table(title=f"{len(report.disagreements)} disagreement(s) to adjudicate")
    for column in ("input", "task", "labels", "question"):
        table.add_column(column)
    for row in report.disagreements:
        labels = ", ".join(f"{name}: {value}" for name, value in row.labels.items())
        table.add_row(shown(row.input_id), row.task, shown(labels), shown(row.question[:80]))
    return table


def register(group: typer.Typer) -> None:
    """Add evaluate, label, agreement to the bench group."""
    group.command("evaluate")(evaluate)
    group.command("label")(label)
    group.command("agreement")(agreement)
