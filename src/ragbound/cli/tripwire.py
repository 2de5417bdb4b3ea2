"""``ragbound tripwire``: add, remove, list, generate, tune and check tripwires."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import (
    HELP_MARKUP,
    WIDTH,
    cached_llm,
    console,
    emit_json,
    fit,
    gather_queries,
    notice,
    progress,
    say,
    show,
    shown,
    utc_text,
    visible,
)
from ragbound.cli.options import (
    LLM_HELP,
    ConcurrencyOpt,
    FieldOpt,
    JsonOpt,
    KbArg,
    LlmOpt,
    QueriesArg,
    QueriesFileOpt,
    RunOpt,
)
from ragbound.errors import InputError

if TYPE_CHECKING:
    from rich.table import Table

OBJECTIVES = ("accuracy", "tpr", "f1", "tpr_at_frr")


def _store(kb_dir: Path):
    from ragbound.knowledge import KnowledgeBase
    from ragbound.tripwires import LiveTripwires

    return LiveTripwires.open(KnowledgeBase.load(kb_dir))


def _report_change(change, json_out: bool) -> None:
    if json_out:
        emit_json(change)
        return
    verb = "added" if change.action == "add" else "removed"
    say(
        f"{verb} {len(change.ids)} tripwire(s) ({shown(', '.join(change.topics))}); "
        f"{change.n_after} in the knowledge base, set {change.set_hash or '(empty)'}"
    )


def add(
    kb_dir: KbArg,
    file: Annotated[
        Path,
        typer.Argument(
            help="Tripwire records: .jsonl, .json, .csv, .tsv, or text lines with --topic.",
            callback=validate.existing_file,
        ),
    ],
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
    """Add tripwires from a file (or labelled example requests); only they are embedded.

    Each record has a text and a topic, and may have an id, a severity (low, medium or high)
    and a note. A line of a text file is one text; give its topic with --topic. A record
    without an id gets a hash of its topic and text. With --label-field the file is a
    labelled set of example requests and only the rows whose label equals --label become
    tripwires (XSTest: --text-field prompt --topic-field type --label-field label).

    A row identical to an earlier one is skipped and counted on stderr. A missing topic, an
    empty text, a bad severity, one id on two different rows, or an id already in the
    knowledge base is an error, and then nothing changes. Tripwires need a dense knowledge
    base (not bm25). On a knowledge base attached to Chroma or Qdrant they go into that
    collection, one record each with the metadata ragbound_tripwire, which the knowledge
    never returns or counts (docs/tripwires.md). The texts are embedded first, then the
    change waits for another writer of the knowledge base (up to $RAGBOUND_LOCK_TIMEOUT
    seconds, 60 by default). --json prints the change: action, at, ids, topics, source,
    n_after and set_hash (the hash of the tripwire set after it).
    """
    from ragbound.tripwires import TripwireFields
    from ragbound.tripwires.files import read_tripwire_file

    fields = TripwireFields(
        text=text_field,
        topic_field=topic_field,
        id=id_field,
        topic=topic,
        label_field=label_field,
        label=label,
    )
    loaded = read_tripwire_file(file, fields)
    if loaded.duplicates:
        # stderr, so --json output stays one object
        sys.stderr.write(
            f"skipped {len(loaded.duplicates)} row(s) identical to an earlier row "
            f"(first at {visible(loaded.duplicates[0])})\n"
        )
    change = _store(kb_dir).add(
        loaded.tripwires, source=str(file), progress=progress(json_out), on_wait=notice
    )
    _report_change(change, json_out)


def remove(
    kb_dir: KbArg,
    topic: Annotated[
        list[str] | None, typer.Option(help="Remove every tripwire of a topic.")
    ] = None,
    id: Annotated[list[str] | None, typer.Option("--id", help="Remove one tripwire by id.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove tripwires by topic or id; nothing is re-embedded.

    --topic and --id repeat and can be mixed. An unknown topic or id is an error, and then
    nothing is removed. --json prints the change, as add does.
    """
    change = _store(kb_dir).remove(topics=topic or (), ids=id or (), on_wait=notice)
    _report_change(change, json_out)


def list_(
    kb_dir: KbArg,
    history: Annotated[bool, typer.Option(help="Show every recorded change.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Topics and counts of the tripwires, the hash of the set, and where they are kept (the
    folder, or the collection an attached knowledge base reads: there every record whose
    metadata holds ``ragbound_tripwire`` is one, whoever added it).

    --history adds every recorded add (+n) and remove (-n): time, topics, the size and hash
    of the set after it and its source (numbered under the table); the ids are in --json.
    --json prints every tripwire (id, text, topic, severity, note, source) one per line, or
    with --history every change.
    """
    store = _store(kb_dir)
    if json_out:
        for change in store.manifest.history if history else store.tripwires:
            emit_json(change)
        return
    out = console()
    out.print(topics_table(store.topics(), store.manifest.set_hash))
    say(f"kept in {shown(store.where)}")
    if history:
        table, legend = history_table(store.manifest.history)
        out.print(table)
        for line in legend:
            say(shown(line))


def generate(
    kb_dir: KbArg,
    topics: Annotated[
        Path,
        typer.Option(
            "--topics",
            help="Topics file (.jsonl/.json/.csv/.tsv): topic, description, optional severity.",
            callback=validate.existing_file,
        ),
    ],
    per_topic: Annotated[
        int, typer.Option(help="Requests to write per topic.", callback=validate.positive_int)
    ] = 10,
    llm: LlmOpt = "local",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Also write the tripwires to this JSONL file.",
            callback=validate.output_file,
        ),
    ] = None,
    add_to_kb: Annotated[
        bool, typer.Option("--add/--no-add", help="Add what was generated to the knowledge base.")
    ] = True,
    concurrency: ConcurrencyOpt = 4,
    json_out: JsonOpt = False,
) -> None:
    """Write tripwires with the LLM from topic descriptions; refusals are reported, not fatal.

    The topics file (.jsonl, .json, .csv or .tsv) has topic and description, and may have
    severity. For each topic the LLM writes --per-topic example requests (prompt
    tripwire-generate). A topic whose reply declines is reported as refused, one whose reply
    never parses as failed, both with the raw reply; what the other topics gave is kept and
    added. Replies are cached, so a rerun is free.

    --json prints one object per topic: topic, kept, status (ok, refused or failed) and
    detail. It is an error when no topic gives tripwires.
    """
    from ragbound.artifacts import write_jsonl
    from ragbound.tripwires.generate import generate_tripwires, read_topics

    specs = read_topics(topics)
    store = _store(kb_dir) if add_to_kb else None
    tripwires, outcomes = generate_tripwires(
        cached_llm(llm),
        specs,
        per_topic=per_topic,
        concurrency=concurrency,
        progress=progress(json_out),
    )
    if out is not None:
        write_jsonl(out, (t.model_dump(mode="json", exclude_none=True) for t in tripwires))
    change = (
        store.add(tripwires, source=f"generated from {topics}", on_wait=notice)
        if store and tripwires
        else None
    )
    if json_out:
        for outcome in outcomes:
            emit_json(outcome)
        return
    for outcome in outcomes:
        detail = f": {outcome.detail[:160]!r}" if outcome.detail else ""
        say(shown(f"{outcome.topic}: {outcome.status}, {outcome.kept} kept{detail}"))
    if change is not None:
        _report_change(change, False)
    if not tripwires:
        raise InputError("no topic produced tripwires (every reply was refused or unreadable)")


def tune(
    kb_dir: KbArg,
    labelled: Annotated[
        Path,
        typer.Option(
            "--labelled",
            help="Queries with a label: safe or unsafe (any record file).",
            callback=validate.existing_file,
        ),
    ],
    objective: Annotated[
        str,
        typer.Option(
            help="accuracy, tpr, f1, or tpr_at_frr (with --max-frr).",
            callback=validate.choice(*OBJECTIVES),
        ),
    ] = "accuracy",
    max_frr: Annotated[
        float,
        typer.Option(
            help="Largest share of safe queries forbidden (false-rejection rate).",
            callback=validate.rate,
        ),
    ] = 0.05,
    field: FieldOpt = None,
    label_field: Annotated[str, typer.Option(help="Label field.")] = "label",
    save: Annotated[bool, typer.Option("--save/--no-save", help="Save the chosen rule.")] = True,
    run: RunOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Grid-search the tripwire rule on labelled queries; save and print the trade-off.

    The labelled file has a query and a label: unsafe, harmful, forbidden, 1, true or reject
    for queries to refuse; safe, harmless, 0, false or allow for the rest. The grid covers k in
    1, 3, 5, 10; a similarity floor of none or 0.3 to 0.6; and rules on the proportion of
    tripwires in the top k, the best tripwire rank, the reciprocal-rank sum, and proportion
    and rank joined by any or all.

    The best rules by --objective are printed next to the paper's default (proportion 0.5
    or rank 1, k = 5) on the same queries, and the best is saved in
    KB_DIR/tripwire-rule.json (unless --no-save), where tripwire check finds it. --run
    records the trade-off surface (RAR Figure 3) for `ragbound report`.
    """
    from ragbound.tripwires import TripwireTest, read_labelled, save_rule, tune_rule

    queries, unsafe = read_labelled(labelled, text_field=field, label_field=label_field)
    guard = TripwireTest.load(kb_dir)
    if len(guard.tripwires) == 0:
        raise InputError(f"{kb_dir} holds no tripwires: add some first (ragbound tripwire add)")
    result = tune_rule(guard, queries, unsafe, objective=objective, max_frr=max_frr)  # type: ignore[arg-type]
    if save:
        save_rule(kb_dir, result.best.rule, on_wait=notice)
    if run is not None:
        from ragbound.report.run import record_tuning

        record_tuning(run, result)
    if json_out:
        emit_json(result)
        return
    out = console()
    table, legend = tuning_table(result)
    out.print(table)
    for line in legend:
        say(line)
    if save:
        say(f"saved the rule {shown(result.best.rule.describe())} to {shown(str(kb_dir))}")


def check(
    kb_dir: KbArg,
    queries: QueriesArg = None,
    queries_file: QueriesFileOpt = None,
    k: Annotated[
        int | None,
        typer.Option(help="Top k (default: the saved rule's).", callback=validate.positive_int),
    ] = None,
    llm: Annotated[
        str | None,
        typer.Option(
            "--llm", help=f"Cascade: ask this LLM about queries the tripwires pass ({LLM_HELP})"
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Find forbidden queries: those whose retrieval surfaces tripwires, naming them.

    Each query is retrieved from the knowledge and the tripwires together; the rule saved by
    tripwire tune decides, else the paper's default (proportion 0.5 or rank 1, k = 5) above
    the set's similarity floor (docs/tripwires.md). --json prints one object per query with
    query, forbidden, rule (the conditions that fired), triggers (id, topic, text, rank,
    similarity, severity), proportion, best_rank, rr_sum, k, floor (its value and how it was
    derived) and tripwire_set (the hash of the set used).

    --llm adds a cascade: the LLM judges each query the tripwires passed (prompt
    moderation-judge, reject or allow) and --json adds its verdict as llm. A reply that
    never gives a verdict lets the query pass.
    """
    from ragbound.tripwires import TripwireTest, load_rule
    from ragbound.tripwires.cascade import cascade, cascade_row

    texts = gather_queries(queries, queries_file)
    rule = load_rule(kb_dir)
    if k is not None:
        rule = rule.model_validate({**rule.model_dump(), "k": k})
    guard = TripwireTest.load(kb_dir, rule)
    decisions = guard.check_many(texts)
    verdicts = (
        cascade(decisions, partial(cached_llm, llm), progress=progress(json_out)) if llm else {}
    )
    if json_out:
        for i, decision in enumerate(decisions):
            emit_json(cascade_row(decision, verdicts.get(i)))
        return
    print_decisions(decisions, rule.describe(), verdicts)


def topics_table(topics: dict[str, int], set_hash: str) -> Table:
    """Tripwires per topic."""
    from rich.table import Table

    table = Table(title=f"{sum(topics.values())} tripwires", caption=f"set {set_hash or '(empty)'}")
    table.add_column("topic")
    table.add_column("tripwires", justify="right")
    for topic, count in topics.items():
        table.add_row(shown(topic), str(count))
    return table


def history_table(history: Sequence) -> tuple[Table, list[str]]:
    """Every recorded add (+n) and remove (-n) in 80 columns, and the legend of its ``src``
    column: ``src N: PATH`` a line (the tripwire ids are in --json)."""
    from rich.table import Table

    table = Table(title="tripwire changes")
    table.add_column("at (UTC)", no_wrap=True)
    table.add_column("change", justify="right", no_wrap=True)
    table.add_column("topics", max_width=14, no_wrap=True, overflow="ellipsis")
    table.add_column("after", justify="right", no_wrap=True)
    table.add_column("set", no_wrap=True)
    table.add_column("src", justify="right", no_wrap=True)
    sources: list[str] = []
    for change in history:
        if change.source and change.source not in sources:
            sources.append(change.source)
        sign = "+" if change.action == "add" else "-"
        table.add_row(
            utc_text(change.at)[:16],
            f"{sign}{len(change.ids)}",
            shown(", ".join(change.topics)),
            str(change.n_after),
            change.set_hash,
            str(sources.index(change.source) + 1) if change.source else "",
        )
    return table, [f"src {i}: {shown(source)}" for i, source in enumerate(sources, start=1)]


def print_decisions(decisions: Sequence, rule: str, verdicts: dict | None = None) -> None:
    """Each query whole (wrapped at spaces), then its decision and the conditions that held,
    then the tripwires in its top k, one a line cut to 80 columns (whole in --json).

    ``verdicts`` maps a row number to the cascade LLM's verdict on a query the tripwires passed.
    """
    verdicts = verdicts or {}
    say(f"tripwire rule: {shown(rule)}")
    for i, d in enumerate(decisions):
        label = "[red]forbidden[/]" if d.forbidden else "[green]passed[/]"
        why = f"  held: {shown(d.rule)}" if d.rule else ""
        if i in verdicts:
            verdict = verdicts[i]
            label = {True: "[red]forbidden (LLM)[/]", False: "[green]passed (LLM)[/]"}.get(
                verdict.forbidden, "[yellow]passed (LLM error)[/]"
            )
        say(shown(d.query))
        show(f"    {label}{why}")
        for t in d.triggers:
            # visible before fit: an escape made visible is counted in the width
            line = fit(visible(f"#{t.rank} {t.similarity:.3f} {t.topic}: {t.text}"), WIDTH - 6)
            console().print(f"      {shown(line)}", soft_wrap=True, highlight=False)


def tuning_table(result) -> tuple[Table, list[str]]:
    """The best rules by the objective, and the paper's default rule on the same queries, as
    numbered rows in 80 columns, and the legend giving each number's rule."""
    from rich.table import Table

    table = Table(
        title=f"tripwire rules by {result.objective}"
        + (f" (safe forbidden <= {result.max_frr:g})" if result.max_frr is not None else "")
        + f": {result.n_unsafe} unsafe, {result.n_safe} safe queries"
    )
    for column in ("rule", "accuracy", "TPR", "safe forbidden", "precision", "F1"):
        table.add_column(column, justify="right", no_wrap=True)
    rows = [(score, "") for score in result.top] + [(result.paper_default, " (paper default)")]
    legend = []
    for number, (score, note) in enumerate(rows, start=1):
        legend.append(f"rule {number}: {score.rule.describe()}{note}")
        table.add_row(
            str(number),
            f"{score.accuracy:.3f}",
            f"{score.tpr:.3f}",
            f"{score.frr:.3f}",
            f"{score.precision:.3f}",
            f"{score.f1:.3f}",
        )
    return table, legend


def build() -> typer.Typer:
    """The ``ragbound tripwire`` group with its commands."""
    group = typer.Typer(
        no_args_is_help=True,
        rich_markup_mode=HELP_MARKUP,
        help="Tripwires: flagged documents; a query retrieving them is forbidden (RAR).",
    )
    group.command("add")(add)
    group.command("remove")(remove)
    group.command("list")(list_)
    group.command("generate")(generate)
    group.command("tune")(tune)
    group.command("check")(check)
    return group
