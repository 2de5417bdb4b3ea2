"""The ``ragbound`` command: index, add, calibrate, check, evaluate."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Annotated, Literal

import typer

from ragbound.cli_support import JsonOpt
from ragbound.cli_support import console as _console
from ragbound.cli_support import emit_json as _emit_json
from ragbound.cli_support import progress as _progress
from ragbound.display import evaluation_table, verdict_table
from ragbound.errors import InputError, RagboundError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Know what your RAG system does not know: calibrated out-of-knowledge tests.",
)

FieldOpt = Annotated[
    str | None,
    typer.Option(
        "--field",
        help="Query field in JSONL/CSV/JSON query files (default: query, question or text).",
    ),
]
RunOpt = Annotated[
    Path | None, typer.Option("--run", help="Record the results in this run folder (for report).")
]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write PNG plots to this folder.")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Use a calibration made against another knowledge base.")
]


def _plot(run_data, folder: Path) -> None:
    from ragbound.report.html import images
    from ragbound.report.plots import save_pngs

    paths = save_pngs(images(run_data), folder)
    sys.stderr.write(f"wrote {len(paths)} plot(s) to {folder}\n")


# ------------------------------------------------------------------ index / add
@app.command()
def index(
    corpus: Annotated[
        list[Path], typer.Argument(help="Files or folders (.txt .md .jsonl .csv .json).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Knowledge-base directory to create.")],
    embedder: Annotated[
        str, typer.Option(help="minilm (default), mpnet, bm25, or a local model folder.")
    ] = "minilm",
    chunk_words: Annotated[int, typer.Option(help="Maximum words per chunk.")] = 200,
    overlap: Annotated[int, typer.Option(help="Words of whole-sentence overlap.")] = 40,
    text_field: Annotated[str, typer.Option(help="Text field of JSONL/CSV/JSON records.")] = "text",
    id_field: Annotated[str | None, typer.Option(help="Id field of records.")] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace a knowledge base already there.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Load, chunk and embed a corpus into a knowledge-base directory."""
    from ragbound.knowledge import MANIFEST, KnowledgeBase

    if (out / MANIFEST).exists() and not overwrite:
        raise InputError(
            f"{out} already holds a knowledge base: add documents with ragbound add, "
            "or pass --overwrite to replace it"
        )
    kb = KnowledgeBase.build(
        corpus,
        embedder=embedder,
        chunk_words=chunk_words,
        overlap=overlap,
        text_field=text_field,
        id_field=id_field,
        progress=_progress(json_out),
    )
    kb.save(out, overwrite=overwrite)
    _report_kb(kb, "indexed", json_out)


@app.command()
def add(
    kb_dir: Annotated[Path, typer.Argument(help="Existing knowledge-base directory.")],
    corpus: Annotated[list[Path], typer.Argument(help="Files or folders to add.")],
    json_out: JsonOpt = False,
) -> None:
    """Add documents to a knowledge base; only the new chunks are embedded."""
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.load(kb_dir)
    added = kb.add(corpus, progress=_progress(json_out))
    kb.save()
    _report_kb(kb, f"added {added} chunks to", json_out)


def _report_kb(kb, verb: str, json_out: bool) -> None:
    m = kb.manifest
    if json_out:
        _emit_json(
            {
                "path": str(kb.path),
                "n_documents": m.n_documents,
                "n_chunks": m.n_chunks,
                "embedder": m.embedder.name,
                "fingerprint": kb.fingerprint,
            }
        )
        return
    _console().print(
        f"{verb} [bold]{kb.path}[/]: {m.n_documents} documents, {m.n_chunks} chunks, "
        f"embedder {m.embedder.name} ({m.embedder.similarity}), fingerprint {kb.fingerprint}"
    )


# -------------------------------------------------------------------- calibrate
@app.command()
def calibrate(
    kb_dir: Annotated[Path, typer.Argument(help="Knowledge-base directory.")],
    queries: Annotated[Path, typer.Option("--queries", help="In-knowledge query file.")],
    field: FieldOpt = None,
    k: Annotated[int, typer.Option("--k", help="Neighbours per query.")] = 32,
    tau: Annotated[float, typer.Option(help="Energy temperature.")] = 1.0,
    statistic: Annotated[str | None, typer.Option(help="Default statistic for check.")] = None,
    alpha: Annotated[float, typer.Option(help="Default significance level.")] = 0.05,
    json_out: JsonOpt = False,
) -> None:
    """Build the empirical null from in-knowledge queries and save it beside the KB."""
    from ragbound.corpus import load_queries
    from ragbound.detect import DEFAULT_STATISTIC, Guard
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.load(kb_dir)
    texts = load_queries(queries, field=field)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        guard = Guard.calibrate(
            kb,
            texts,
            k=k,
            tau=tau,
            statistic=statistic or DEFAULT_STATISTIC,
            alpha=alpha,
            queries_source=str(queries),
            progress=_progress(json_out),
        )
    for warning in caught:
        sys.stderr.write(f"warning: {warning.message}\n")
    folder = guard.save()
    detector = guard.detector()
    info = {
        "path": str(folder),
        "n_queries": len(texts),
        "k": k,
        "tau": tau,
        "statistic": detector.statistic,
        "alpha": alpha,
        "critical_value": detector.critical_value_,
        "kb_fingerprint": kb.fingerprint,
    }
    if json_out:
        _emit_json(info)
        return
    _console().print(
        f"calibrated on {len(texts)} queries (k={k}); {detector.statistic} critical value at "
        f"alpha={alpha}: {detector.critical_value_:.4f}; saved to {folder}"
    )


# ------------------------------------------------------------------------ check
@app.command()
def check(
    kb_dir: Annotated[Path, typer.Argument(help="Calibrated knowledge-base directory.")],
    query: Annotated[list[str] | None, typer.Argument(help="Queries to test.")] = None,
    queries: Annotated[Path | None, typer.Option("--queries", help="Query file.")] = None,
    field: FieldOpt = None,
    statistic: Annotated[
        str | None, typer.Option(help="Statistic (default: calibration's).")
    ] = None,
    alpha: Annotated[float | None, typer.Option(help="Significance level.")] = None,
    evidence: Annotated[int, typer.Option(help="Nearest chunks to show per query.")] = 3,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Test queries: p-value that each is out of the knowledge base's knowledge."""
    from ragbound.corpus import load_queries
    from ragbound.detect import Guard

    texts = list(query or [])
    if queries is not None:
        texts += load_queries(queries, field=field)
    if not texts:
        raise InputError("give queries as arguments or with --queries FILE")
    guard = Guard.load(kb_dir, force=force)
    verdicts = guard.check_many(
        texts, statistic=statistic, alpha=alpha, evidence=evidence, progress=_progress(json_out)
    )
    if json_out:
        for verdict in verdicts:
            _emit_json(verdict)
        return
    _console().print(verdict_table(verdicts))


# --------------------------------------------------------------------- evaluate
@app.command()
def evaluate(
    kb_dir: Annotated[Path, typer.Argument(help="Calibrated knowledge-base directory.")],
    in_knowledge: Annotated[Path, typer.Option("--in-knowledge", help="Held-out IK queries.")],
    out_of_knowledge: Annotated[Path, typer.Option("--out-of-knowledge", help="OoK queries.")],
    field: FieldOpt = None,
    samples: Annotated[int, typer.Option(help="Queries drawn per side per run.")] = 300,
    runs: Annotated[int, typer.Option(help="Random draws to average.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the draws.")] = 0,
    run: RunOpt = None,
    plot: PlotOpt = None,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """AUROC, AUPRC, TPR at 5% FPR and DER for every statistic (paper protocol)."""
    from ragbound.corpus import load_queries
    from ragbound.detect import Guard
    from ragbound.detect.evaluate import evaluate as run_evaluation
    from ragbound.detect.evaluate import statistic_scores

    guard = Guard.load(kb_dir, force=force)
    ik = load_queries(in_knowledge, field=field)
    ook = load_queries(out_of_knowledge, field=field)
    scored = statistic_scores(guard, ik, ook, progress=_progress(json_out))
    report = run_evaluation(guard, ik, ook, samples=samples, runs=runs, seed=seed, scored=scored)
    if run or plot:
        from ragbound.report import RunData, record_evaluation
        from ragbound.report.run import score_lists

        if run:
            record_evaluation(run, report, scored)
        if plot:
            _plot(RunData(path=plot, evaluation=report, scores=score_lists(scored)), plot)
    if json_out:
        _emit_json(report)
        return
    _console().print(evaluation_table(report))


# ------------------------------------------------------------------------ shift
@app.command()
def shift(
    kb_dir: Annotated[Path, typer.Argument(help="Knowledge-base directory (calibrated).")],
    queries: Annotated[
        Path,
        typer.Option("--queries", help="A query log (JSONL with time and query) or a query file."),
    ],
    window: Annotated[
        str | None,
        typer.Option(
            help="Window: a query count (50) or log time (15m, 1h). Default 50 for a log."
        ),
    ] = None,
    step: Annotated[
        float | None,
        typer.Option(help="Slide by this much (queries or seconds); default: tumbling."),
    ] = None,
    alpha: Annotated[
        float, typer.Option(help="Significance level (whole stream for a log).")
    ] = 0.05,
    correction: Annotated[
        str, typer.Option(help="spending (false alarms <= alpha over the stream) or none.")
    ] = "spending",
    test: Annotated[
        str, typer.Option(help="ks (test statistic) or mmd (embeddings; batch only).")
    ] = "ks",
    statistic: Annotated[
        str | None, typer.Option(help="Test statistic (default: calibration's).")
    ] = None,
    time_field: Annotated[str, typer.Option(help="Timestamp field of the log.")] = "time",
    query_field: Annotated[str, typer.Option(help="Query field of the log.")] = "query",
    state: Annotated[
        Path | None, typer.Option(help="Monitor state file (default: KB_DIR/monitor/<log>.json).")
    ] = None,
    run: RunOpt = None,
    plot: PlotOpt = None,
    restart: Annotated[
        bool, typer.Option(help="Forget the saved state and read the log anew.")
    ] = False,
    field: FieldOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Test whether queries have drifted from the calibration queries (paper eq. 3).

    A JSONL log whose lines carry a timestamp is monitored window by window (KS per window,
    resumable: a rerun reads only what was appended). Any other query file is one batch.
    """
    from ragbound.detect import Guard
    from ragbound.detect.monitor import WindowSpec, is_log

    guard = Guard.load(kb_dir)
    if window is None and not is_log(queries, time_field):
        _shift_batch(guard, queries, field, test, statistic, alpha, run, json_out)
        return
    if test != "ks":
        raise InputError("a query log is monitored with the KS test; use --test ks")
    spec = WindowSpec.parse(window or "50")
    _shift_log(
        guard,
        queries,
        spec,
        step,
        alpha,
        correction,
        statistic,
        time_field,
        query_field,
        state,
        restart,
        run,
        plot,
        json_out,
    )


def _shift_batch(
    guard, queries: Path, field, test: str, statistic, alpha: float, run, json_out: bool
) -> None:
    from ragbound.corpus import load_queries
    from ragbound.detect.shift import shift_test

    batch = load_queries(queries, field=field)
    report = shift_test(
        guard,
        batch,
        test=test,
        statistic=statistic,
        alpha=alpha,  # type: ignore[arg-type]
        progress=_progress(json_out),
    )
    if run:
        from ragbound.report import record_shift

        record_shift(run, report)
    if json_out:
        _emit_json(report)
        return
    verdict = "[red]shift[/]" if report.reject else "[green]no shift[/]"
    critical = f", critical value {report.critical_value:.4f}" if report.critical_value else ""
    _console().print(
        f"{report.test.upper()} {report.statistic:.4f}{critical}, p = {report.p_value:.4g} "
        f"({report.n_test} queries vs {report.n_reference} calibration queries): {verdict} "
        f"at alpha = {alpha}"
    )


def _shift_log(
    guard,
    log: Path,
    spec,
    step,
    alpha,
    correction,
    statistic,
    time_field,
    query_field,
    state: Path | None,
    restart: bool,
    run: Path | None,
    plot: Path | None,
    json_out: bool,
) -> None:
    from ragbound.artifacts import sha256_text
    from ragbound.detect.monitor import ShiftMonitor
    from ragbound.report import RunData, record_windows

    if state is None:
        state = guard.kb.path / "monitor" / f"{sha256_text(str(log.resolve()))[:16]}.json"
    if restart:
        state.unlink(missing_ok=True)
    monitor = ShiftMonitor(
        guard,
        spec,
        step=step,
        alpha=alpha,
        correction=correction,  # type: ignore[arg-type]
        statistic=statistic,
        time_field=time_field,
        query_field=query_field,
    )
    console = None if json_out else _console()
    tested = alarms = 0
    seen = []
    for result in monitor.follow(log, state, progress=_progress(json_out)):
        tested += 1
        alarms += result.alarm
        seen.append(result)
        if run:
            record_windows(run, [result])
        if json_out:
            _emit_json(result)
        elif console is not None:
            flag = "[red]ALARM[/]" if result.alarm else "ok"
            console.print(
                f"window {result.window:>4}  {result.start} .. {result.end}  n={result.n:<4} "
                f"KS={result.statistic:.3f}  p={result.p_value:.3g}  "
                f"alpha={result.alpha:.3g}  {flag}"
            )
    summary = (
        f"{tested} window(s) tested, {alarms} alarm(s); state saved to {state} "
        f"(windows of {spec.describe()})"
    )
    if tested == 0:
        summary = f"no window completed: the log has fewer new queries than one window; {summary}"
    sys.stderr.write(summary + "\n")
    if plot and seen:
        _plot(RunData(path=plot, windows=seen), plot)


# ----------------------------------------------------------------------- report
@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="Run folder (evaluate/shift --run).")],
    out: Annotated[Path, typer.Option("--out", help="HTML file to write.")] = Path("report.html"),
    plot: PlotOpt = None,
) -> None:
    """Write one self-contained HTML report (images inline, no network) of a run folder."""
    from ragbound.report import load_run, write_report

    data = load_run(run_dir)
    write_report(data, out)
    if plot:
        _plot(data, plot)
    sys.stderr.write(f"wrote {out}\n")


# ------------------------------------------------------------------------ synth
@app.command()
def synth(
    kb_dir: Annotated[Path, typer.Argument(help="Knowledge-base directory.")],
    out: Annotated[Path, typer.Option("--out", help="Query file to write (JSONL).")],
    n: Annotated[int, typer.Option("--n", help="Chunks to sample, one question each.")] = 300,
    llm: Annotated[
        str, typer.Option("--llm", help="local, local:/path/model.gguf or openai:MODEL.")
    ] = "local",
    seed: Annotated[int, typer.Option(help="Seed of the chunk sample.")] = 0,
    examples: Annotated[
        str,
        typer.Option(help="In-context examples: pubmed, textbooks, or a JSON/JSONL file."),
    ] = "pubmed",
    prompt: Annotated[
        str, typer.Option(help="Prompt id (synth-query, or synth-query-paper: paper 1's).")
    ] = "synth-query",
    context: Annotated[
        str, typer.Option(help="document: the chunk with its neighbours; chunk: it alone.")
    ] = "document",
    group_by: Annotated[
        str | None,
        typer.Option(help="Chunk metadata field whose equal values make one document."),
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(help="Most LLM calls to make (default 2 x n).")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="LLM calls in flight.")] = 4,
    json_out: JsonOpt = False,
) -> None:
    """Write synthetic in-knowledge queries from sampled chunks (for calibrate --queries).

    Questions that point at their source ("the study"), copy an example or repeat another
    are dropped, and more chunks are drawn until --n are kept. Replies are cached, so a rerun
    is free and an interrupted run resumes.
    """
    from ragbound.knowledge import KnowledgeBase
    from ragbound.llm import CachedLLM, ResponseCache, make_llm
    from ragbound.synth.queries import generate_queries, load_examples, save_queries

    context_choice = _context_choice(context)
    kb = KnowledgeBase.load(kb_dir)
    model = CachedLLM(make_llm(llm), ResponseCache())
    queries, report = generate_queries(
        kb,
        model,
        n=n,
        seed=seed,
        examples=load_examples(examples),
        prompt_id=prompt,
        context=context_choice,
        group_by=group_by,
        max_requests=max_requests,
        concurrency=concurrency,
        progress=_progress(json_out),
    )
    save_queries(out, queries)
    if json_out:
        _emit_json(report)
        return
    dropped = ", ".join(f"{k}: {v}" for k, v in report.dropped.items()) or "none"
    _console().print(
        f"wrote {report.kept} queries ({report.requested} LLM calls) to {out} (dropped: {dropped})"
    )


def _context_choice(value: str) -> Literal["document", "chunk"]:
    if value == "document":
        return "document"
    if value == "chunk":
        return "chunk"
    raise InputError(f"--context must be document or chunk, got {value!r}")


def _register_subcommands() -> None:
    from ragbound.cli_bench import bench_app
    from ragbound.cli_tripwire import tripwire_app

    app.add_typer(tripwire_app, name="tripwire")
    app.add_typer(bench_app, name="bench")


_register_subcommands()


def main() -> None:
    """Entry point: user errors print one clear line, never a traceback."""
    try:
        app(standalone_mode=False)
    except RagboundError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
    except typer.Abort:
        raise SystemExit(130) from None
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        raise


if __name__ == "__main__":
    main()
