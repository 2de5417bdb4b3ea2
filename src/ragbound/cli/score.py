"""``ragbound test-log``: a p-value for every query of a log, in this process or on Ray."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import emit_json, notice, progress, visible, wrap
from ragbound.cli.options import (
    AddressOpt,
    CalibratedKbArg,
    EngineOpt,
    FieldOpt,
    ForceOpt,
    JsonOpt,
    StatisticOpt,
    WorkersOpt,
)
from ragbound.errors import InputError

if TYPE_CHECKING:
    from ragbound.detect import Guard
    from ragbound.detect.logscore import ScoreTable


def test_log(
    kb_dir: CalibratedKbArg,
    log: Annotated[
        list[Path],
        typer.Argument(
            help="A query log (JSONL with query and time; its rotated files LOG.000001, ... "
            "first) or any query file; several (one log per replica) are merged by time, "
            "each row's source naming its file.",
            callback=validate.existing_file,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Scores to write: .jsonl or .parquet.", callback=validate.output_file
        ),
    ],
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 2,
    statistic: StatisticOpt = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            help="Significance level (default: calibration's).", callback=validate.probability
        ),
    ] = None,
    field: FieldOpt = None,
    time_field: Annotated[
        str, typer.Option(help="Timestamp field copied to the output, when present.")
    ] = "time",
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Write the out-of-knowledge p-value of every query in LOG (or several).

    One row per query, in file order: line, time (as logged, or null), query, score (the
    statistic, higher = more out of knowledge), p_value and out_of_knowledge (p_value <=
    alpha). Parquet files keep the statistic and alpha in their metadata. A conversation's
    turn that ragbound serve logged is scored on the text the service searched (its
    conversation.searched, then the row's query), so its p-value is the service's.

    --engine ray embeds and searches on ray.data with --workers actors, each loading the
    knowledge base once (the KB folder must be readable at the same path on every node);
    without --address it starts Ray on this machine. Both engines give the same scores
    (docs/shift.md). With the answerability test (calibrate --answerability), queries are
    flagged as the gate flags them: out_of_knowledge at the boundary test's share of alpha
    (the alpha printed), and unanswerable counts the others that test flags (run in this
    process); without it, unanswerable is null. --json prints a summary: n,
    out_of_knowledge, unanswerable, statistic, alpha, engine, out. A calibration made
    against another knowledge base, or with another search, is refused unless --force.
    """
    from ragbound.detect import Guard
    from ragbound.detect.logscore import check_score_output, score_file, write_scores
    from ragbound.engines import make_search

    check_score_output(out)
    if engine == "local" and address is not None:
        raise InputError("--address needs --engine ray")
    guard = Guard.load(kb_dir, force=force)
    if guard.answerability is not None:  # both tests at their share of alpha, as the gate
        alpha = guard.answerability_level(alpha, statistic)
    search = make_search(
        guard,
        engine,  # type: ignore[arg-type]
        address=address,
        workers=workers,
        progress=progress(json_out),
        statistic=statistic,
    )
    table = score_file(
        guard, log, search, field=field, time_field=time_field, statistic=statistic, alpha=alpha
    )
    write_scores(table, out)
    flagged = int(table.out_of_knowledge.sum())
    unanswerable = _unanswerable(guard, table, progress(json_out))
    summary = {
        "n": len(table.query),
        "out_of_knowledge": flagged,
        "unanswerable": unanswerable,
        "statistic": table.statistic,
        "alpha": table.alpha,
        "engine": engine,
        "out": str(out),
    }
    if json_out:
        emit_json(summary)
        return
    also = "" if unanswerable is None else f", {unanswerable} unanswerable"
    notice(
        wrap(
            visible(
                f"scored {summary['n']} queries ({engine}): {flagged} out of knowledge{also} at "
                f"alpha = {table.alpha:g} ({table.statistic}); wrote {out}"
            )
        )
    )


def _unanswerable(guard: Guard, table: ScoreTable, show: bool) -> int | None:
    """The queries of ``table`` in knowledge that the answerability test flags at the
    table's level, as the gate decides them: the test runs on those alone (None: the
    calibration has no such test). It reads each one's nearest chunks: one more search, in
    this process."""
    model = guard.answerability
    if model is None:
        return None
    flagged = zip(table.query, table.out_of_knowledge, strict=True)
    texts = [query for query, out in flagged if not out]
    if not texts:
        return 0
    from ragbound.detect.retrieval import search_in_batches

    hits = search_in_batches(guard.kb, texts, model.depth, progress=show)
    return sum(v.unanswerable for v in guard.answers.verdicts(texts, hits, table.alpha))


def register(app: typer.Typer) -> None:
    """Add ``test-log`` to ``app``."""
    app.command("test-log")(test_log)
