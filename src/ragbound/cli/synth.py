"""``ragbound synth``: synthetic in-knowledge queries for calibration, written by an LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, cast

import typer

from ragbound.cli import validate
from ragbound.cli.common import cached_llm, emit_json, notice, progress, say
from ragbound.cli.options import ConcurrencyOpt, JsonOpt, KbArg, LlmOpt, SeedOpt

CONTEXTS = ("document", "chunk")


def synth(
    kb_dir: KbArg,
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
        typer.Option(
            help="In-context examples: pubmed, textbooks, or a file of real user questions "
            "(any query/records file).",
            callback=validate.non_empty,
        ),
    ] = "pubmed",
    prompt: Annotated[
        str | None,
        typer.Option(
            help="Prompt id (synth-query; synth-query-users, the default when --examples is a "
            "file of your users' questions; synth-query-paper: paper 1's).",
            callback=validate.non_empty,
        ),
    ] = None,
    context: Annotated[
        str,
        typer.Option(
            help="document: the chunk with its neighbours from its document (found on its "
            "own unless --group-by); chunk: it alone.",
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
    style of the --examples. Without --group-by, documents are found on their own
    (docs/online-test.md); a notice on stderr (and the context field of every line) says how.

    --examples FILE with real questions from your users (20 are enough) switches to the
    few-shot prompt synth-query-users, which copies their length and level of detail: the
    closer the synthetic questions are to real ones, the closer the calibration holds. Up to
    8 examples are shown per call, a different seeded sample each time.

    Replies that do not parse, are too short, point at their source ("the study"), copy an
    example or repeat another question are dropped, and more chunks are drawn until --n are
    kept or --max-requests calls are spent. Each output line has query, chunk_id, doc_id,
    prompt_id, prompt_version, context, model, created_at and cached. --json prints wanted,
    requested, kept, context, dropped (count per reason) and errors. `calibrate
    --real-queries` checks the result against real questions.

    Replies are cached on disk (~/.cache/ragbound/llm, or $RAGBOUND_CACHE/llm), so a rerun
    is free and an interrupted run resumes; --llm is described in docs/llms.md.
    """
    from ragbound.knowledge import KnowledgeBase
    from ragbound.llm import load_prompt
    from ragbound.synth.queries import (
        context_structure,
        default_prompt,
        generate_queries,
        load_examples,
        save_queries,
    )

    kb = KnowledgeBase.load(kb_dir)
    structure = context_structure(kb, cast(Literal["document", "chunk"], context), group_by)
    shown = load_examples(examples)
    prompt_id = prompt or default_prompt(examples)
    load_prompt(prompt_id)  # refused here, before the notice, when unknown
    model = cached_llm(llm)
    hint = " (--group-by FIELD names the document)" if structure.kind == "adjacent" else ""
    notice(f"{structure.describe()}{hint}; prompt {prompt_id}")
    queries, report = generate_queries(
        kb,
        model,
        n=n,
        seed=seed,
        examples=shown,
        prompt_id=prompt_id,
        structure=structure,
        max_requests=max_requests,
        concurrency=concurrency,
        progress=progress(json_out),
    )
    save_queries(out, queries)
    if json_out:
        emit_json(report)
        return
    dropped = ", ".join(f"{k}: {v}" for k, v in report.dropped.items()) or "none"
    say(f"wrote {report.kept} queries ({report.requested} LLM calls) to {out} (dropped: {dropped})")


def register(app: typer.Typer) -> None:
    """Add ``synth`` to ``app``."""
    app.command("synth")(synth)
