"""``ragbound shift``: has the query stream drifted from the calibration queries?"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import (
    console,
    emit_json,
    notice,
    progress,
    say,
    utc_text,
    visible,
    wrap,
    write_plots,
)
from ragbound.cli.options import (
    AddressOpt,
    CalibratedKbArg,
    EngineOpt,
    FieldOpt,
    ForceOpt,
    JsonOpt,
    PlotOpt,
    RunOpt,
    StatisticOpt,
    WorkersOpt,
)
from ragbound.detect.names import DEFAULT_ALPHA
from ragbound.errors import InputError

if TYPE_CHECKING:
    from ragbound.detect.monitor import ShiftMonitor

TESTS = ("ks", "mmd")
CORRECTIONS = ("spending", "period", "arl", "none")
# On Ray, log lines are read and searched this many at a time: every call starts its actors
# (each loads the model), so batches are large enough to make that a small share.
RAY_SCORE_BATCH = 32_768


def shift(
    kb_dir: CalibratedKbArg,
    queries: Annotated[
        list[Path],
        typer.Option(
            "--queries",
            help="A query log (JSONL with time and query; its rotated files LOG.000001, ... "
            "are read first) or a query file. Several logs (one per replica) are merged by "
            "time and monitored from their start on each run (--state follows one log).",
            callback=validate.existing_file,
        ),
    ],
    window: Annotated[
        str | None,
        typer.Option(
            help="Window: a query count (50) or log time (15m, 1h). Default 50 for a log.",
            callback=validate.window,
        ),
    ] = None,
    step: Annotated[
        float | None,
        typer.Option(
            help="Slide by this much (queries or seconds); default: tumbling.",
            callback=validate.positive_number,
        ),
    ] = None,
    alpha: Annotated[
        float,
        typer.Option(
            help="Significance level (whole stream for a log).", callback=validate.probability
        ),
    ] = DEFAULT_ALPHA,
    correction: Annotated[
        str,
        typer.Option(
            help="False alarms over many windows: spending (window i, from 0, at "
            "alpha·6/(π²(i+1)²): at most alpha chance of any false alarm in the whole stream; "
            "blind late in long streams), period (at most alpha per "
            "--period of log time), arl (one false alarm per --arl windows on average), none "
            "(alpha per window).",
            callback=validate.choice(*CORRECTIONS),
        ),
    ] = "spending",
    period: Annotated[
        str | None,
        typer.Option(
            help="With --correction period: the log time that gets the whole alpha "
            "(1d = a UTC day, 6h).",
            callback=validate.period,
        ),
    ] = None,
    arl: Annotated[
        float | None,
        typer.Option(
            help="With --correction arl: windows expected per false alarm (> 1); --alpha is "
            "not used.",
            callback=validate.average_run_length,
        ),
    ] = None,
    test: Annotated[
        str,
        typer.Option(
            help="ks (test statistic) or mmd (embeddings; batch only).",
            callback=validate.choice(*TESTS),
        ),
    ] = "ks",
    statistic: StatisticOpt = None,
    time_field: Annotated[str, typer.Option(help="Timestamp field of the log.")] = "time",
    query_field: Annotated[str, typer.Option(help="Query field of the log.")] = "query",
    state: Annotated[
        Path | None,
        typer.Option(help="Monitor state file (default: one per log in KB_DIR/monitor/)."),
    ] = None,
    run: RunOpt = None,
    plot: PlotOpt = None,
    restart: Annotated[
        bool, typer.Option(help="Forget the saved state and read the log anew.")
    ] = False,
    field: FieldOpt = None,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 2,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Test whether queries have drifted from the calibration queries (paper eq. 3).

    A small p-value means the queries no longer look like the ones the corpus covers. A
    .jsonl file whose first line has the --time-field is a query log, watched window by
    window, and so is any file given with --window; any other query file is one batch.
    Both need a calibration of at least 20 queries (docs/shift.md).

    Batch: one two-sample test against the calibration queries: --test ks on the
    statistic's values (the paper's critical value sqrt(-ln(alpha/2)(n+m)/(2nm)) is reported
    too), --test mmd on the query embeddings (1000 permutations). --json prints test,
    score_statistic, statistic, p_value, alpha, shifted, critical_value, n_reference,
    n_test, method and kb_fingerprint.

    Log: each line is a JSON object with a timestamp (ISO 8601 or epoch seconds) and a
    query, in time order. Each full window of --window queries (or of log time) gets a KS
    test; windows do not overlap unless --step is smaller than the window. --correction sets
    the level of each window so that false alarms stay rare over many windows. Without
    --json each window is one row of 80 columns (window, UTC times of its first and last
    query, n, KS distance, p-value, level, ALARM); --json prints one object per window:
    window, start, end, first_line, last_line, n, statistic, p_value, alpha (this window's
    level), alarm, critical_value and score_statistic.

    The monitor's state is saved as it reads (by default in KB_DIR/monitor/), so a rerun
    reads only the lines appended since and never loses a window; --restart starts over. A
    line without query or timestamp, a timestamp earlier than the one before, a log that got
    shorter and a state file damaged or made with other settings are errors. A second
    monitor of a state file waits for the first ($RAGBOUND_LOCK_TIMEOUT s), then is refused.
    --engine ray embeds and searches the queries on Ray (see test-log), with the same tests
    and state. A calibration made against another knowledge base, or with another search,
    is refused unless --force.
    """
    from ragbound.detect import Guard
    from ragbound.detect.monitor import SCORE_BATCH, ShiftMonitor, WindowSpec, is_log
    from ragbound.engines import make_search

    if engine == "local" and address is not None:
        raise InputError("--address needs --engine ray")
    if engine == "ray" and test == "mmd":
        raise InputError("--test mmd runs in this process; use --engine local")
    if len(queries) > 1 and not all(is_log(log, time_field) for log in queries):
        raise InputError("several --queries are merged as query logs: give JSONL logs only")
    if len(queries) > 1 and state is not None:
        raise InputError("--state follows one log: give one --queries log with it")
    batch = window is None and not is_log(queries[0], time_field)
    if not batch:
        if test != "ks":
            raise InputError("a query log is monitored with the KS test; use --test ks")
        spec = WindowSpec.parse(window or "50")
        if spec.size is not None:
            validate.check_step(step, spec.size, "queries")
        else:
            validate.check_step(step, float(spec.seconds or 0), "s")
    guard = Guard.load(kb_dir, force=force)
    search = None
    if engine == "ray":
        search = make_search(guard, "ray", address=address, workers=workers, statistic=statistic)
    if batch:
        _shift_batch(guard, queries[0], field, test, statistic, alpha, run, json_out, search)
        return
    monitor = ShiftMonitor(
        guard,
        spec,
        step=step,
        alpha=alpha,
        correction=correction,  # type: ignore[arg-type]
        period=period,
        arl=arl,
        statistic=statistic,
        time_field=time_field,
        query_field=query_field,
        search=search,
        score_batch=RAY_SCORE_BATCH if search is not None else SCORE_BATCH,
    )
    _shift_log(monitor, queries, state, restart, run, plot, json_out)


def _shift_batch(
    guard, queries: Path, field, test: str, statistic, alpha: float, run, json_out: bool, search
) -> None:
    from ragbound.corpus import load_queries
    from ragbound.detect.shift import shift_test

    batch = load_queries(queries, field=field)
    report = shift_test(
        guard,
        batch,
        test=test,  # type: ignore[arg-type]
        statistic=statistic,
        alpha=alpha,
        progress=progress(json_out),
        search=search,
    )
    if run:
        from ragbound.report import record_shift

        record_shift(run, report)
    if json_out:
        emit_json(report)
        return
    verdict = "[red]shift[/]" if report.shifted else "[green]no shift[/]"
    critical = f", critical value {report.critical_value:.4f}" if report.critical_value else ""
    say(
        f"{report.test.upper()} {report.statistic:.4f}, p = {report.p_value:.4g}: {verdict} at "
        f"alpha = {alpha} ({report.n_test} queries vs {report.n_reference} calibration "
        f"queries{critical})"
    )


def _shift_log(
    monitor: ShiftMonitor,
    logs: list[Path],
    state: Path | None,
    restart: bool,
    run: Path | None,
    plot: Path | None,
    json_out: bool,
) -> None:
    """Follow one log (its state saved) or merge several, a window a line or JSON object."""
    from ragbound.artifacts import sha256_text
    from ragbound.report import RunData, record_windows

    if state is None and len(logs) == 1:
        kb_path = monitor.guard.kb.path
        state = kb_path / "monitor" / f"{sha256_text(str(logs[0].resolve()))[:16]}.json"
    out = None if json_out else console()
    seen = []
    if len(logs) == 1:
        results = monitor.follow(
            logs[0], state, progress=progress(json_out), restart=restart, on_wait=notice
        )
    else:
        results = monitor.follow_merged(logs)
    for result in results:
        seen.append(result)
        if run:
            record_windows(run, [result])
        if out is None:
            emit_json(result)
        else:
            if len(seen) == 1:
                out.print(WINDOW_HEADER, highlight=False)
            out.print(window_row(result), highlight=False)
        sys.stdout.flush()  # shown before the state that counts the window as done is saved
    kept = f"state saved to {state}" if state else f"{len(logs)} logs merged, no state"
    windows = monitor.window.describe()
    alarms = sum(result.alarm for result in seen)
    summary = f"{len(seen)} window(s) tested, {alarms} alarm(s) (windows of {windows})"
    if not seen:
        summary = f"no window completed: the log has fewer new queries than one window; {summary}"
    notice(f"{wrap(visible(summary))}\n{wrap(visible(kept))}")
    if plot and seen:
        write_plots(RunData(path=plot, windows=seen), plot)


# one window a line in 76 columns: the level is the window's alpha after the correction
WINDOW_HEADER = (
    f"{'#':>5} {'from (UTC)':<19} {'to':<14} {'n':>5} {'KS':>5} {'p-value':>8} {'level':>8}"
)


def window_row(result) -> str:
    """A tested window as a row under ``WINDOW_HEADER`` (rich markup on an alarm)."""
    start, end = utc_text(result.start), utc_text(result.end)
    to = end[11:] if end[:10] == start[:10] else end[5:]  # the date again only if it changed
    flag = "[red]ALARM[/]" if result.alarm else "ok"
    return (
        f"{result.window:>5} {start:<19} {to:<14} {result.n:>5} {result.statistic:>5.3f} "
        f"{result.p_value:>8.3g} {result.alpha:>8.3g} {flag}"
    )


def register(app: typer.Typer) -> None:
    """Add ``shift`` to ``app``."""
    app.command("shift")(shift)
