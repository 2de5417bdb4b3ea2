"""``ragbound tripwire``: add, remove, list, generate, tune and check tripwires."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli_support import JsonOpt, console, emit_json, progress
from ragbound.errors import InputError

tripwire_app = typer.Typer(
    no_args_is_help=True,
    help="Tripwires: flagged documents that reject the queries retrieving them (RAR).",
)

KbArg = Annotated[Path, typer.Argument(help="Knowledge-base directory.")]
LlmOpt = Annotated[
    str, typer.Option("--llm", help="local, local:/path/model.gguf or openai:MODEL.")
]


def _store(kb_dir: Path):
    from ragbound.knowledge import KnowledgeBase
    from ragbound.tripwires import TripwireStore

    return TripwireStore.open(KnowledgeBase.load(kb_dir))


def _report_change(change, json_out: bool) -> None:
    if json_out:
        emit_json(change)
        return
    verb = "added" if change.action == "add" else "removed"
    console().print(
        f"{verb} {len(change.ids)} tripwire(s) ({', '.join(change.topics)}); "
        f"{change.n_after} in the knowledge base, set {change.set_hash or '(empty)'}"
    )


@tripwire_app.command("add")
def add(
    kb_dir: KbArg,
    file: Annotated[Path, typer.Argument(help="Tripwire file (.jsonl, .csv or .json).")],
    topic: Annotated[str | None, typer.Option(help="Topic for records that have none.")] = None,
    text_field: Annotated[str, typer.Option(help="Field holding the text.")] = "text",
    topic_field: Annotated[str, typer.Option(help="Field holding the topic.")] = "topic",
    id_field: Annotated[str, typer.Option(help="Field holding the id.")] = "id",
    label_field: Annotated[
        str | None, typer.Option(help="Labelled examples: keep only records whose label ...")
    ] = None,
    label: Annotated[str, typer.Option(help="... equals this value.")] = "unsafe",
    json_out: JsonOpt = False,
) -> None:
    """Add tripwires from a file (or labelled example requests); only they are embedded."""
    from ragbound.tripwires import TripwireFields, read_tripwires

    fields = TripwireFields(
        text=text_field,
        topic_field=topic_field,
        id=id_field,
        topic=topic,
        label_field=label_field,
        label=label,
    )
    tripwires = read_tripwires(file, fields)
    change = _store(kb_dir).add(tripwires, source=str(file), progress=progress(json_out))
    _report_change(change, json_out)


@tripwire_app.command("remove")
def remove(
    kb_dir: KbArg,
    topic: Annotated[
        list[str] | None, typer.Option(help="Remove every tripwire of a topic.")
    ] = None,
    id: Annotated[list[str] | None, typer.Option("--id", help="Remove one tripwire by id.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove tripwires by topic or id; nothing is re-embedded."""
    change = _store(kb_dir).remove(topics=topic or (), ids=id or ())
    _report_change(change, json_out)


@tripwire_app.command("list")
def list_(
    kb_dir: KbArg,
    history: Annotated[bool, typer.Option(help="Show every recorded change.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Topics and counts of the tripwires (with --json: every tripwire, one per line)."""
    store = _store(kb_dir)
    if json_out:
        for change in store.manifest.history if history else store.tripwires:
            emit_json(change)
        return
    from ragbound.display import tripwire_history_table, tripwire_topics_table

    out = console()
    out.print(tripwire_topics_table(store.topics(), store.manifest.set_hash))
    if history:
        out.print(tripwire_history_table(store.manifest.history))


@tripwire_app.command("generate")
def generate(
    kb_dir: KbArg,
    topics: Annotated[
        Path, typer.Option("--topics", help="Topics file (.jsonl/.json/.csv): topic, description.")
    ],
    per_topic: Annotated[int, typer.Option(help="Requests to write per topic.")] = 10,
    llm: LlmOpt = "local",
    out: Annotated[
        Path | None, typer.Option("--out", help="Also write the tripwires to this JSONL file.")
    ] = None,
    add_to_kb: Annotated[
        bool, typer.Option("--add/--no-add", help="Add what was generated to the knowledge base.")
    ] = True,
    concurrency: Annotated[int, typer.Option(help="LLM calls in flight.")] = 4,
    json_out: JsonOpt = False,
) -> None:
    """Write tripwires with the LLM from topic descriptions; refusals are reported, not fatal."""
    from ragbound.artifacts import write_jsonl
    from ragbound.llm import CachedLLM, ResponseCache, make_llm
    from ragbound.tripwires.generate import generate_tripwires, read_topics

    specs = read_topics(topics)
    store = _store(kb_dir) if add_to_kb else None
    model = CachedLLM(make_llm(llm), ResponseCache())
    tripwires, outcomes = generate_tripwires(
        model, specs, per_topic=per_topic, concurrency=concurrency, progress=progress(json_out)
    )
    if out is not None:
        write_jsonl(out, (t.model_dump(mode="json", exclude_none=True) for t in tripwires))
    change = (
        store.add(tripwires, source=f"generated from {topics}") if store and tripwires else None
    )
    if json_out:
        for outcome in outcomes:
            emit_json(outcome)
        return
    for outcome in outcomes:
        detail = f": {outcome.detail[:160]!r}" if outcome.detail else ""
        console().print(f"{outcome.topic}: {outcome.status}, {outcome.kept} kept{detail}")
    if change is not None:
        _report_change(change, False)
    if not tripwires:
        raise InputError("no topic produced tripwires (every reply was refused or unreadable)")


@tripwire_app.command("tune")
def tune(
    kb_dir: KbArg,
    labelled: Annotated[
        Path, typer.Option("--labelled", help="Queries with a label field: safe or unsafe.")
    ],
    objective: Annotated[
        str, typer.Option(help="accuracy, tpr, f1, or tpr_at_frr (with --max-frr).")
    ] = "accuracy",
    max_frr: Annotated[float, typer.Option(help="Largest false-rejection rate on safe.")] = 0.05,
    field: Annotated[str | None, typer.Option(help="Query field (default: query, ...).")] = None,
    label_field: Annotated[str, typer.Option(help="Label field.")] = "label",
    save: Annotated[bool, typer.Option("--save/--no-save", help="Save the chosen rule.")] = True,
    run: Annotated[
        Path | None, typer.Option("--run", help="Record the trade-off in this run folder.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Grid-search the rejection rule on labelled queries; save and print the trade-off."""
    from ragbound.tripwires import TripwireGuard, read_labelled, save_rule, tune_rule

    queries, unsafe = read_labelled(labelled, text_field=field, label_field=label_field)
    guard = TripwireGuard.load(kb_dir)
    if len(guard.tripwires) == 0:
        raise InputError(f"{kb_dir} holds no tripwires: add some first (ragbound tripwire add)")
    result = tune_rule(guard, queries, unsafe, objective=objective, max_frr=max_frr)  # type: ignore[arg-type]
    if save:
        save_rule(kb_dir, result.best.rule)
    if run is not None:
        from ragbound.report.run import record_tuning

        record_tuning(run, result)
    if json_out:
        emit_json(result)
        return
    from ragbound.display import tuning_table

    out = console()
    out.print(tuning_table(result))
    if save:
        out.print(f"saved the rule {result.best.rule.describe()} to {kb_dir}")


@tripwire_app.command("check")
def check(
    kb_dir: KbArg,
    queries: Annotated[list[str] | None, typer.Argument(help="Queries to check.")] = None,
    queries_file: Annotated[
        Path | None, typer.Option("--queries", help="File of queries (.txt/.jsonl/.csv/.json).")
    ] = None,
    k: Annotated[int | None, typer.Option(help="Top k (default: the saved rule's).")] = None,
    llm: Annotated[
        str | None,
        typer.Option("--llm", help="Cascade: ask this LLM about queries the tripwires pass."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Reject queries whose retrieval surfaces tripwires, naming the tripwires that fired."""
    from ragbound.corpus import load_queries
    from ragbound.tripwires import TripwireGuard, load_rule

    texts = list(queries or []) + (load_queries(queries_file) if queries_file else [])
    if not texts:
        raise InputError("give queries as arguments or with --queries FILE")
    rule = load_rule(kb_dir)
    if k is not None:
        rule = rule.model_validate({**rule.model_dump(), "k": k})
    guard = TripwireGuard.load(kb_dir, rule)
    decisions = guard.check_many(texts)
    verdicts = _cascade(llm, decisions, json_out) if llm else {}
    if json_out:
        for i, decision in enumerate(decisions):
            row = decision.model_dump(mode="json")
            if i in verdicts:
                row["llm"] = verdicts[i].model_dump(mode="json")
                row["rejected"] = bool(verdicts[i].rejected)
                row["rule"] = "llm" if verdicts[i].rejected else None
            emit_json(row)
        return
    from ragbound.display import tripwire_decisions_table

    console().print(tripwire_decisions_table(decisions, rule.describe(), verdicts))


def _cascade(spec: str, decisions, json_out: bool) -> dict:
    from ragbound.llm import CachedLLM, ResponseCache, make_llm
    from ragbound.tripwires.cascade import moderate

    passed = [i for i, d in enumerate(decisions) if not d.rejected]
    if not passed:
        return {}
    model = CachedLLM(make_llm(spec), ResponseCache())
    verdicts = moderate(model, [decisions[i].query for i in passed], progress=progress(json_out))
    return dict(zip(passed, verdicts, strict=True))
