"""``ragbound synth``: synthetic in-knowledge queries for calibration, written by an LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, cast

import typer

from ragbound.cli import validate
from ragbound.cli.common import (
    ConcurrencyOpt,
    JsonOpt,
    LlmOpt,
    SeedOpt,
    cached_llm,
    console,
    emit_json,
    progress,
)

CONTEXTS = ("document", "chunk")


def synth(
    kb_dir: Annotated[Path, typer.Argument(help="Knowledge-base directory.")],
    out: Annotated[
        Path,
        typer.Option("--out", help="Query file to write (JSONL).", callback=validate.output_file),
    ],
    n: Annotated[
        int,
        typer.Option(
            "--n", help="Questions to keep (one per sampled chunk).", callback=validate.positive_int
        ),
    ] = 300,
    llm: LlmOpt = "local",
    seed: SeedOpt = 0,
    examples: Annotated[
        str,
        typer.Option(help="In-context examples: pubmed, textbooks, or a JSON/JSONL file."),
    ] = "pubmed",
    prompt: Annotated[
        str, typer.Option(help="Prompt id (synth-query, or synth-query-paper: paper 1's).")
    ] = "synth-query",
    context: Annotated[
        str,
        typer.Option(
            help="document: the chunk with its neighbours; chunk: it alone.",
            callback=validate.choice(*CONTEXTS),
        ),
    ] = "document",
    group_by: Annotated[
        str | None,
        typer.Option(help="Chunk metadata field whose equal values make one document."),
    ] = None,
    max_requests: Annotated[
        int | None,
        typer.Option(
            help="Most LLM calls to make (default 2 x n).", callback=validate.positive_int
        ),
    ] = None,
    concurrency: ConcurrencyOpt = 4,
    json_out: JsonOpt = False,
) -> None:
    """Write synthetic in-knowledge queries from sampled chunks (for calibrate --queries).

    Chunks of at least 20 words are sampled (seeded). The LLM sees each chunk with its
    neighbours from the same document, up to 400 words (--context chunk: the chunk alone, as
    in the paper; --group-by: a metadata field whose equal values make one document, when a
    document is stored as several records), and writes one self-contained question in the
    style of the --examples.

    Replies that do not parse, are too short, point at their source ("the study"), copy an
    example or repeat another question are dropped, and more chunks are drawn until --n are
    kept or --max-requests calls are spent. Each output line has query, chunk_id, doc_id,
    prompt_id, prompt_version, model, created_at and cached. --json prints wanted, requested, kept,
    dropped (count per reason) and errors.

    Replies are cached on disk (~/.cache/ragbound/llm, or $RAGBOUND_CACHE/llm), so a rerun
    is free and an interrupted run resumes. --llm local needs `pip install
    'ragbound[local]'`; openai:MODEL reads RAGBOUND_LLM_BASE_URL or OPENAI_BASE_URL and
    RAGBOUND_LLM_API_KEY or OPENAI_API_KEY.
    """
    from ragbound.knowledge import KnowledgeBase
    from ragbound.synth.queries import generate_queries, load_examples, save_queries

    kb = KnowledgeBase.load(kb_dir)
    queries, report = generate_queries(
        kb,
        cached_llm(llm),
        n=n,
        seed=seed,
        examples=load_examples(examples),
        prompt_id=prompt,
        context=cast(Literal["document", "chunk"], context),
        group_by=group_by,
        max_requests=max_requests,
        concurrency=concurrency,
        progress=progress(json_out),
    )
    save_queries(out, queries)
    if json_out:
        emit_json(report)
        return
    dropped = ", ".join(f"{k}: {v}" for k, v in report.dropped.items()) or "none"
    console().print(
        f"wrote {report.kept} queries ({report.requested} LLM calls) to {out} (dropped: {dropped})"
    )


def register(app: typer.Typer) -> None:
    """Add ``synth`` to ``app``."""
    app.command("synth")(synth)
