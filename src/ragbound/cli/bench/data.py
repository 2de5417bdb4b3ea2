"""``ragbound bench facts | qa | import | filter``: documents -> facts -> diverse QA pairs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import cached_llm, console, emit_json, progress, say, shown
from ragbound.cli.options import ConcurrencyOpt, JsonOpt, LlmOpt

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.table import Table

    from ragbound.bench.models import FilteredSet, QASet

OutOpt = Annotated[
    Path, typer.Option("--out", help="JSON file to write.", callback=validate.output_file)
]
ERRORS_SHOWN = 5


def _write(path: Path, artifact: BaseModel) -> None:
    from ragbound.artifacts import write_json

    write_json(path, artifact.model_dump(mode="json"))


def _print_errors(errors: list[str]) -> None:
    out = console()
    for error in errors[:ERRORS_SHOWN]:
        out.print(f"  [yellow]{shown(error[:300])}[/]", highlight=False)
    if len(errors) > ERRORS_SHOWN:
        out.print(f"  ... and {len(errors) - ERRORS_SHOWN} more (see the file's errors)")


def facts(
    docs: Annotated[
        list[Path], typer.Argument(help="Documents or folders (.txt .md .jsonl .json .csv .tsv).")
    ],
    out: OutOpt,
    llm: LlmOpt = "local",
    window: Annotated[
        int, typer.Option(help="Sentences shown per LLM call.", callback=validate.positive_int)
    ] = 8,
    skip_empty: Annotated[
        bool, typer.Option("--skip-empty", help="Skip empty documents instead of failing.")
    ] = False,
    concurrency: ConcurrencyOpt = 4,
    json_out: JsonOpt = False,
) -> None:
    """Split documents into sentences and have the LLM write self-contained atomic facts.

    Documents are read as by ragbound index, split into paragraphs at blank lines and into
    sentences as index does. The LLM sees --window sentences per call (prompt bench-facts)
    and each fact must cite one of them: the fact set keeps its document and sentence
    index. Sentences that point at a table, figure, image or sign are skipped before any
    call and listed with the reason; a fact citing a sentence outside its window, or a reply
    that never parses, is listed in the file's errors.

    An empty document is an error (usually a failed PDF extraction or a wrong path) unless
    --skip-empty. Replies are cached, so a rerun is free. --json prints out, documents,
    sentences, facts, skipped and errors (counts).
    """
    from ragbound.bench.facts import build_facts

    fact_set = build_facts(
        cached_llm(llm),
        docs,
        window=window,
        skip_empty=skip_empty,
        concurrency=concurrency,
        progress=progress(json_out),
    )
    _write(out, fact_set)
    summary = {
        "out": str(out),
        "documents": len(fact_set.documents),
        "sentences": sum(doc.n_sentences for doc in fact_set.documents),
        "facts": len(fact_set.facts),
        "skipped": len(fact_set.skipped),
        "errors": len(fact_set.errors),
    }
    if json_out:
        emit_json(summary)
        return
    say(
        shown(
            f"wrote {summary['facts']} facts from {summary['documents']} documents "
            f"({summary['sentences']} sentences, {summary['skipped']} skipped) to {out}"
        )
    )
    _print_errors(fact_set.errors)


def qa(
    facts_file: Annotated[
        Path,
        typer.Argument(
            help="Fact set from `ragbound bench facts`.", callback=validate.existing_file
        ),
    ],
    out: OutOpt,
    llm: LlmOpt = "local",
    name: Annotated[
        str | None, typer.Option(help="Name of the QA set (default: file stem).")
    ] = None,
    concurrency: ConcurrencyOpt = 4,
    json_out: JsonOpt = False,
) -> None:
    """Write one objective question and answer per fact.

    Uses the prompt bench-qa (KnowOrNot appendix A.1). Each pair keeps its fact and
    document ids. A fact whose reply never parses gives no pair and is listed in the file's
    errors with the raw reply. Replies are cached. --json prints out, facts, pairs and
    errors (counts).
    """
    from ragbound.artifacts import read_manifest
    from ragbound.bench.models import FACTS_FORMAT, FactSet
    from ragbound.bench.qa import generate_qa

    fact_set = read_manifest(facts_file, FactSet, FACTS_FORMAT, "fact set")
    qa_set = generate_qa(
        cached_llm(llm),
        fact_set,
        name=name or Path(out).stem,
        concurrency=concurrency,
        progress=progress(json_out),
    )
    _write(out, qa_set)
    summary = {"out": str(out), "facts": len(fact_set.facts), "pairs": len(qa_set.pairs)}
    if json_out:
        emit_json({**summary, "errors": len(qa_set.errors)})
        return
    say(shown(f"wrote {len(qa_set.pairs)} QA pairs from {len(fact_set.facts)} facts to {out}"))
    _print_errors(qa_set.errors)


def import_(
    file: Annotated[
        Path,
        typer.Argument(
            help="QA pairs: .json, .jsonl, .csv or .tsv.", callback=validate.existing_file
        ),
    ],
    out: OutOpt,
    question_field: Annotated[str, typer.Option(help="Field holding the question.")] = "question",
    answer_field: Annotated[str, typer.Option(help="Field holding the answer.")] = "answer",
    id_field: Annotated[
        str | None, typer.Option(help="Field holding each pair's id (default: a hash).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Name of the set (default: file stem).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Import curated QA pairs from a record file.

    The file is .jsonl, .csv, .tsv or .json (a list of objects, or PolicyBench's object
    whose "questions" is that list). Without --id-field a pair's id is a hash of its
    question and answer. A missing field, an empty question or answer, and a duplicate id
    are errors naming the file and row. --json prints out, name and pairs.
    """
    from ragbound.bench.qa import import_qa

    qa_set = import_qa(
        file, question_field=question_field, answer_field=answer_field, id_field=id_field, name=name
    )
    _write(out, qa_set)
    if json_out:
        emit_json({"out": str(out), "name": qa_set.name, "pairs": len(qa_set.pairs)})
        return
    say(shown(f"imported {len(qa_set.pairs)} QA pairs as {qa_set.name!r} to {out}"))


def filter_(
    qa_file: Annotated[
        Path,
        typer.Argument(
            help="QA set from `bench qa` or `bench import`.", callback=validate.existing_file
        ),
    ],
    out: OutOpt,
    method: Annotated[
        str,
        typer.Option(
            help="both, keyword, semantic or none.",
            callback=validate.choice("both", "keyword", "semantic", "none"),
        ),
    ] = "both",
    keyword_threshold: Annotated[
        float,
        typer.Option(help="Keep TF-IDF uniqueness >= min + this x range.", callback=validate.rate),
    ] = 0.3,
    semantic_threshold: Annotated[
        float,
        typer.Option(
            help="Least cosine distance to every kept pair.", callback=validate.finite_number
        ),
    ] = 0.3,
    embedder: Annotated[str, typer.Option(help="minilm, mpnet or a model folder.")] = "minilm",
    json_out: JsonOpt = False,
) -> None:
    """Keep a diverse subset of QA pairs; print what was dropped and why.

    keyword: each pair's TF-IDF uniqueness is 1 minus its cosine similarity to the most
    similar other pair; pairs scoring at least min + --keyword-threshold x (max - min) are
    kept. semantic: in file order, a pair is kept when its cosine distance to every pair
    kept so far is at least --semantic-threshold. both: keyword, then semantic. none keeps
    every pair.

    Each dropped pair is listed with its filter, score, cut-off and (semantic) the kept pair
    it was too close to. --json prints out, pairs, kept and dropped (id, filter, reason,
    score, cutoff, near_id).
    """
    from ragbound.artifacts import read_manifest
    from ragbound.bench.filters import filter_pairs
    from ragbound.bench.models import QA_FORMAT, QASet

    qa_set = read_manifest(qa_file, QASet, QA_FORMAT, "QA set")
    filtered = filter_pairs(
        qa_set,
        method,
        keyword_threshold,
        semantic_threshold,
        embedder,
        progress=progress(json_out),
    )
    _write(out, filtered)
    if json_out:
        emit_json(
            {
                "out": str(out),
                "pairs": len(qa_set.pairs),
                "kept": len(filtered.kept),
                "dropped": [drop.model_dump(mode="json") for drop in filtered.dropped],
            }
        )
        return
    out_console = console()
    if filtered.dropped:
        out_console.print(_drops_table(filtered, qa_set))
    out_console.print(
        f"kept {len(filtered.kept)} of {len(qa_set.pairs)} pairs "
        f"({len(filtered.dropped)} dropped, method {method}) -> {out}"
    )


def _drops_table(filtered: FilteredSet, qa_set: QASet) -> Table:
    """One row per dropped pair: filter, score, cut-off, the near kept pair, the question."""
    from rich.table import Table

    questions = {pair.id: pair.question for pair in qa_set.pairs}
    table = Table(title=f"dropped from {filtered.name}")
    for column in ("id", "filter", "score", "cut-off", "near", "question"):
        table.add_column(column, overflow="fold")
    for drop in filtered.dropped:
        table.add_row(
            shown(drop.id),
            drop.filter,
            f"{drop.score:.3f}",
            f"{drop.cutoff:.3f}",
            shown(drop.near_id or ""),
            shown(questions.get(drop.id, "")[:120]),
        )
    return table


def register(group: typer.Typer) -> None:
    """Add facts, qa, import, filter to the bench group."""
    group.command("facts")(facts)
    group.command("qa")(qa)
    group.command("import")(import_)
    group.command("filter")(filter_)
