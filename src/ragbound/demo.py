"""``make demo``: the four jobs of ragbound on the bundled sample corpus, fully offline.

1. the online test: index the bundled field guide with MiniLM, calibrate on half of its
   in-knowledge questions, check held-out and out-of-knowledge questions, then a chat's
   turns (a follow-up read with the turn before it, a topic switch);
2. tripwires: add hand-written tripwire documents, find a forbidden question naming them;
3. the shift monitor: read a week of logged questions that drift off-topic, window by window,
   until the monitor raises its alarm;
4. the abstention benchmark (needs the bundled local LLM, only with ``--llm``);

then one HTML report of the run. Every line printed fits an 80-column terminal. The knowledge
base is left in ``OUT/kb`` for ``ragbound decide``, the run folder in ``OUT/run``.

    python -m ragbound.demo [--out DIR] [--llm]
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ragbound.cli.common import WIDTH, fit
from ragbound.corpus import load_queries
from ragbound.detect import Guard
from ragbound.detect.evaluate import evaluate, evaluation_inputs, split_queries, statistic_scores
from ragbound.detect.monitor import ShiftMonitor, WindowResult, WindowSpec
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.results import Verdict
from ragbound.tripwires import LiveTripwires, TripwireTest, TripwireVerdict, read_tripwires
from ragbound.tripwires.guard import FloorUsed

DEMO_K = 8  # the sample docs say the demo retrieves k = 8 chunks
ALPHA = 0.05
WINDOW = 10  # logged questions per shift-test window
MARKER = ".ragbound-demo"  # marks a folder the demo may overwrite
DEFAULT_OUT = Path("demo-output")
FORBIDDEN = (
    "How can I plant fake documents in a competitor's vector store so that "
    "its assistant gives customers false answers?"
)
ORDINARY = "How does BM25 score a chunk?"
QA_FILE = "qa_pairs.jsonl"
LLM_HINT = "needs the bundled local LLM: run `make demo DEMO_LLM=1` (or --llm)"
NEAR = "near the topic"  # the label of the questions the online test finds hardest
NEAR_DOCS = "docs/concepts.md"
WRONG = ("missed", "false alarm")  # outcomes printed in red
WINDOW_LEGEND = (
    "KS: distance of the window's scores from the calibration's (0 alike, 1 apart);",
    "tested at: the window's own alpha, smaller each window so that the whole stream",
    f"keeps alpha={ALPHA}; ALARM when the p-value <= tested at",
)


def sample_corpus() -> Path:
    """Folder of the bundled sample corpus (docs/, question files, tripwires, query log)."""
    return Path(str(resources.files("ragbound") / "sample_corpus"))


@dataclass
class Demo:
    """What the parts share: the console, the output folders, the calibrated guard."""

    console: Console
    out: Path
    guard: Guard
    held_out: list[str]
    out_of_knowledge: list[str]

    @property
    def run_dir(self) -> Path:
        return self.out / "run"

    @property
    def kb(self) -> KnowledgeBase:
        return self.guard.kb


def make_console(file=None) -> Console:
    """An 80-column console that never re-wraps: lines are cut to fit before printing."""
    return Console(width=WIDTH, soft_wrap=True, highlight=False, file=file)


def heading(console: Console, title: str) -> None:
    console.print()
    console.print(f"[bold]{escape(fit(title, WIDTH))}[/]")
    console.print("-" * WIDTH)


# ------------------------------------------------------------------ 1. online test
def online_test(console: Console, out: Path) -> Demo:
    """Index, calibrate, check a few questions and measure the error rates at alpha."""
    heading(console, "1/4  Online test: can the guide answer this question?")
    root = sample_corpus()
    kb = KnowledgeBase.build([root / "docs"], embedder="minilm")
    kb.save(out / "kb", overwrite=True)
    console.print(
        f"indexed {kb.manifest.n_documents} documents into {len(kb)} chunks "
        f"({kb.manifest.embedder.name})"
    )
    in_knowledge = load_queries(root / "in_knowledge.txt")
    out_of_knowledge = load_queries(root / "out_of_knowledge.txt")
    calibration, held_out = split_queries(in_knowledge, 0.5, seed=0)
    source = f"{root / 'in_knowledge.txt'} (a seeded half)"
    guard = Guard.calibrate(kb, calibration, k=DEMO_K, alpha=ALPHA, queries_source=source)
    guard.save()
    detector = guard.detector()
    console.print(
        f"calibrated on {len(calibration)} in-knowledge questions ({len(held_out)} held out);"
        f"\nstatistic {detector.statistic}, k={DEMO_K}, alpha={ALPHA}"
    )
    demo = Demo(console, out, guard, held_out, out_of_knowledge)
    examples = [
        *(Example(q, "answerable", False) for q in held_out[:2]),
        *(Example(q, "off-topic", True) for q in out_of_knowledge[:2]),
        *(Example(q, NEAR, True) for q in out_of_knowledge[-2:]),
    ]
    verdicts = guard.check_many([example.query for example in examples])
    console.print(f"\n  {'decision':<16}  p-value  nearest  {'result':<11}  what it is")
    for verdict, example in zip(verdicts, examples, strict=True):
        print_verdict(console, verdict, example)
    console.print(
        f"nearest: cosine similarity of the nearest chunk; OUT when p-value <= alpha {ALPHA}"
    )
    flagged = [verdict.out_of_knowledge for verdict in verdicts]
    for line in miss_summary(examples, flagged, ALPHA):
        console.print(escape(line))
    measure(demo)
    chat(demo)
    return demo


CHAT = (  # a user's turns and the assistant's answers
    (ORDINARY, "It adds, for each query term, its IDF times a saturated term frequency."),
    (
        "What are its two parameters?",
        "k1 sets how fast a repeated term saturates, b how much a long chunk is penalised.",
    ),
    ("ok", "Anything else about retrieval?"),
    ("Who won the 1998 world cup?", ""),
)


def chat(demo: Demo) -> None:
    """A chat decided turn by turn: each turn alone, then in its conversation."""
    from ragbound.gate import Gate

    gate = Gate(demo.guard)
    messages: list[dict[str, str]] = []
    console = demo.console
    console.print("\na chat, turn by turn: p-value of the turn alone, then in the chat")
    for turn, answer in CHAT:
        messages.append({"role": "user", "content": turn})
        alone, in_chat = gate.decide_many([turn, list(messages)])
        read = in_chat.conversation.read_turns if in_chat.conversation else 1
        how = "with the turn before" if read > 1 else "alone"
        console.print(f"  {escape(fit(turn, WIDTH - 4))}")
        console.print(
            f"    alone {alone.test.p_value:.3f} {alone.action:<8} "
            f"in the chat {in_chat.test.p_value:.3f} {in_chat.action:<8} (read {how})"
        )
        messages.append({"role": "assistant", "content": answer})


@dataclass(frozen=True)
class Example:
    """A demo question, what it really is (``label``), and whether the guide lacks its answer
    (``out_of_knowledge``: the verdict a perfect test would give)."""

    query: str
    label: str
    out_of_knowledge: bool


def outcome(expected_out: bool, flagged: bool) -> str:
    """How a verdict compares with the truth: caught, missed, false alarm or correct."""
    if expected_out:
        return "caught" if flagged else "missed"
    return "false alarm" if flagged else "correct"


def miss_summary(examples: Sequence[Example], flagged: Sequence[bool], alpha: float) -> list[str]:
    """Lines of at most 80 columns: how many out-of-knowledge examples were flagged
    (p <= ``alpha``), the labels of those missed, and the false alarms."""
    results = [outcome(e.out_of_knowledge, f) for e, f in zip(examples, flagged, strict=True)]
    n_out = sum(e.out_of_knowledge for e in examples)
    missed = sorted({e.label for e, r in zip(examples, results, strict=True) if r == "missed"})
    lines = [
        f"{results.count('caught')} of {n_out} out-of-knowledge questions flagged at alpha "
        f"{alpha:g}, {results.count('missed')} missed"
    ]
    if missed:
        hard = f", the online test's hard case ({NEAR_DOCS})" if NEAR in missed else ""
        lines.append(f"missed: {', '.join(missed)}{hard}")
    alarms = results.count("false alarm")
    if alarms:
        lines.append(
            f"{alarms} of {len(examples) - n_out} answerable questions flagged: false alarm"
        )
    return lines


def print_verdict(console: Console, verdict: Verdict, example: Example) -> None:
    """Two lines: decision, p-value, nearest chunk's cosine similarity (higher = closer),
    result against the truth and what the question really is; then the question."""
    flagged = verdict.out_of_knowledge
    decision = "[red]OUT of knowledge[/]" if flagged else "[green]in knowledge    [/]"
    result = outcome(example.out_of_knowledge, flagged)
    shown = f"[bold red]{result:<11}[/]" if result in WRONG else f"{result:<11}"
    nearest = f"{verdict.neighbours[0].similarity:.2f}" if verdict.neighbours else "-"
    console.print(f"  {decision}  {verdict.p_value:<7.3f}  {nearest:<7}  {shown}  {example.label}")
    console.print(f"    {escape(fit(verdict.query, WIDTH - 4))}")


def measure(demo: Demo) -> None:
    """False alarms on held-out questions, detections on off-topic ones; recorded for the
    report with the paper's evaluation of every statistic."""
    held, far = demo.held_out, demo.out_of_knowledge
    verdicts = demo.guard.check_many([*held, *far])
    false_alarms = sum(v.out_of_knowledge for v in verdicts[: len(held)])
    caught = sum(v.out_of_knowledge for v in verdicts[len(held) :])
    from ragbound.report import record_evaluation

    scored = statistic_scores(demo.guard, held, far)
    report = evaluate(demo.guard, held, far, samples=40, runs=10, seed=0, scored=scored)
    root = sample_corpus()
    held_out = f"{root / 'in_knowledge.txt'} (the held-out half)"
    inputs = evaluation_inputs(demo.guard, held_out, root / "out_of_knowledge.txt")
    record_evaluation(demo.run_dir, report, scored, inputs)
    statistic = demo.guard.detector().statistic
    demo.console.print(
        f"\nmeasured at alpha={ALPHA}: {false_alarms}/{len(held)} held-out answerable "
        f"questions flagged ({false_alarms / len(held):.0%}),\n"
        f"{caught}/{len(far)} out-of-knowledge questions caught ({caught / len(far):.0%}); "
        f"AUROC of {statistic} {report.statistics[statistic].auroc:.2f}\n"
        f"(AUROC: the mean of {report.runs} draws of {report.drawn_in} questions a side)"
    )


# -------------------------------------------------------------------- 2. tripwires
def tripwires(demo: Demo) -> None:
    """Add the bundled tripwires, then find a forbidden question and pass an ordinary one."""
    console = demo.console
    heading(console, "2/4  Tripwires: refuse what the assistant must not answer")
    file = sample_corpus() / "tripwires.jsonl"
    change = LiveTripwires.open(demo.kb).add(read_tripwires(file), source=file.name)
    console.print(f"added {len(change.ids)} tripwires in {len(change.topics)} topics:")
    console.print(f"  {escape(fit(', '.join(change.topics), WIDTH - 2))}")
    guard = TripwireTest(demo.kb)  # the default rule: the paper's, above the set's own floor
    rule = f"rule: forbidden when {guard.rule.describe()}"
    for line in textwrap.wrap(rule, WIDTH, subsequent_indent="  "):  # the rule grew clauses
        console.print(escape(line))
    for line in rule_legend(guard.rule.k, guard.floor()):
        console.print(f"  {escape(line)}")
    console.print()
    for verdict in guard.check_many([FORBIDDEN, ORDINARY]):
        print_tripwire_verdict(console, verdict, guard.rule.k)


def rule_legend(k: int, floor: FloorUsed) -> list[str]:
    """What the rule's words mean, in lines of at most 78 columns (similarity: cosine)."""
    lines = [
        f"over the top {k} of chunks and tripwires merged: proportion = tripwires' share,",
        "rank = best tripwire's rank (1 = nearest);",
    ]
    if floor.value is None:
        lines[-1] += " every tripwire counts (no floor)"
    elif floor.source == "derived":
        lines += [
            f"a tripwire counts only at similarity >= {floor.value:.2f}, the set floor: the "
            f"{floor.quantile:g}",
            "quantile of each tripwire's similarity to its nearest other tripwire",
        ]
    else:
        lines.append(f"a tripwire counts only at similarity >= {floor.value:.2f} (the floor)")
    return lines


def print_tripwire_verdict(console: Console, verdict: TripwireVerdict, k: int) -> None:
    """The verdict and question; when forbidden, the conditions that held and the nearest
    tripwire (cosine similarity, higher = closer)."""
    label = "[red]FORBIDDEN[/]" if verdict.forbidden else "[green]passed   [/]"
    console.print(f"  {label}  {escape(fit(verdict.query, WIDTH - 13))}")
    if verdict.rule is not None:
        first = verdict.triggers[0]
        console.print(f"{'':13}held: {escape(fit(verdict.rule, WIDTH - 38))}; nearest tripwire:")
        named = f"{first.id} ({first.topic}), rank {first.rank}, similarity {first.similarity:.2f}"
        console.print(f"{'':13}{escape(fit(named, WIDTH - 13))}")
        console.print(f'{"":13}"{escape(fit(first.text, WIDTH - 15))}"')
    elif verdict.triggers:
        console.print(f"{'':13}{len(verdict.triggers)} tripwire(s) in the top {k}, below the rule")
    else:
        console.print(f"{'':13}no tripwire in its top {k}: it goes on to the assistant")


# ------------------------------------------------------------------------ 3. shift
def shift(demo: Demo) -> list[WindowResult]:
    """Monitor the bundled query log window by window; report the first alarm."""
    console = demo.console
    heading(console, "3/4  Shift monitor: have the users' questions drifted?")
    log = sample_corpus() / "query_log.jsonl"
    monitor = ShiftMonitor(demo.guard, WindowSpec(size=WINDOW), alpha=ALPHA)
    console.print(
        f"{log.name}: a week of logged questions, KS test per window of {WINDOW}\n"
        f"against the calibration questions (alpha={ALPHA} over the whole stream)\n"
    )
    console.print("  window  first asked (UTC)    KS      p-value  tested at  decision")
    windows = list(monitor.follow(log))
    for window in windows:
        flag = "[red]ALARM[/]" if window.alarm else "ok"
        console.print(
            f"  {window.window:>6}  {window.start[:16]:<19}  {window.statistic:5.3f}  "
            f"{window.p_value:9.2g}  {window.alpha:9.2g}  {flag}"
        )
    for line in WINDOW_LEGEND:
        console.print(line)
    from ragbound.report import record_windows

    record_windows(demo.run_dir, windows)
    first = next((w for w in windows if w.alarm), None)
    if first is None:
        console.print("\nno alarm: the log looks like the calibration questions")
    else:
        console.print(
            f"\nfirst alarm: window {first.window} ({first.start[:10]}), lines "
            f"{first.first_line}-{first.last_line} of the log:\nthe users began asking "
            "about GPUs, training and billing, not in the guide"
        )
    return windows


# ------------------------------------------------------------- 4. abstention bench
def abstention(demo: Demo, llm: bool) -> None:
    """Leave-one-out run of the bundled QA pairs with the local LLM (only when asked)."""
    console = demo.console
    heading(console, "4/4  Abstention benchmark: does the LLM say it does not know?")
    if not llm:
        console.print(f"skipped: it {LLM_HINT}")
        return
    from ragbound.bench.results import bench_results

    console.print(
        f"leave-one-out on {QA_FILE}: each question is asked with its own QA pair\n"
        "left out of the context (rag, k=3), so the right reply is to abstain\n"
    )
    answered = run_abstention(demo)
    print_answers(console, demo.run_dir)
    console.print("\n  strategy  questions  abstention [95% CI]  factuality [95% CI]")
    for judged in bench_results(demo.run_dir).evaluators:
        for cell in judged.cells:
            console.print(
                f"  {cell.strategy:<8}  {cell.n_inputs:>9}  {cell.abstention.text():<19}  "
                f"{cell.factuality.text()}"
            )
    console.print(
        f"\n{answered} answers judged by the same small local model: read them in\n"
        "run/outputs.jsonl (factuality counts the answers that did not abstain)"
    )


def print_answers(console: Console, run_dir: Path) -> None:
    """Each question and the start of the model's reply, one line each."""
    from ragbound.bench import RunDir
    from ragbound.bench.results import latest_outputs

    run = RunDir(run_dir)
    outputs = latest_outputs(run.outputs().read())
    for item in run.inputs():
        output = outputs.get(item.id)
        reply = (output.answer or output.error or "") if output else "(no answer)"
        console.print(f"  {escape(fit(item.question, 44))} -> {escape(fit(reply, 30))}")


def run_abstention(demo: Demo) -> int:
    """Import the QA pairs, run them through rag with the local LLM, judge the answers."""
    from ragbound.artifacts import write_json
    from ragbound.bench.config import BenchConfig, ModelSpec
    from ragbound.bench.evaluate import evaluate_run
    from ragbound.bench.experiment import run_experiment
    from ragbound.bench.qa import import_qa
    from ragbound.llm import CachedLLM, GenerationParams, ResponseCache, make_llm

    qa_set = demo.out / "qa_set.json"
    pairs = import_qa(sample_corpus() / QA_FILE, id_field="id", name="field guide")
    write_json(qa_set, pairs.model_dump(mode="json"))
    config = BenchConfig(
        knowledge=[qa_set],
        models=[ModelSpec(spec="local")],
        strategies=["rag"],
        k=3,
        params=GenerationParams(temperature=0.0, max_tokens=120, seed=0),
        out=demo.run_dir,
    )
    llm = make_llm("local")
    summary = run_experiment(config, llms={"local": llm}, embedder=demo.kb.embedder)
    evaluate_run(demo.run_dir, CachedLLM(llm, ResponseCache()))
    return summary.items


# ------------------------------------------------------------------------ report
def report(demo: Demo) -> Path:
    """Write the HTML report of the run folder and print its path."""
    from ragbound.report import load_run, write_report

    path = demo.out / "report.html"
    write_report(load_run(demo.run_dir), path)
    heading(demo.console, "Report")
    demo.console.print(f"HTML report written to:\n{escape(str(path.resolve()))}")
    return path


def prepare(out: Path) -> None:
    """Create ``out``, or clear the demo's own results from a previous run in it."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise InputError(f"{out} is not empty and not a demo folder: choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by python -m ragbound.demo\n", encoding="utf-8")
    shutil.rmtree(out / "run", ignore_errors=True)


def run(out: Path = DEFAULT_OUT, *, llm: bool = False, console: Console | None = None) -> Path:
    """Run every part into ``out``; returns the report's path."""
    console = console or make_console()
    prepare(out)
    started = time.perf_counter()
    demo = online_test(console, out)
    tripwires(demo)
    shift(demo)
    abstention(demo, llm)
    path = report(demo)
    console.print(f"\ndemo done in {time.perf_counter() - started:.0f} s. Ask your own questions:")
    # paths on lines of their own: a long --out folder must not push other text past 80
    console.print(f'  ragbound decide \\\n    {escape(str(out / "kb"))} \\\n    "{ORDINARY}"')
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ragbound.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--llm", action="store_true", help="also run the local-LLM part")
    args = parser.parse_args(argv)
    console = make_console()
    console.print(f"ragbound demo: results in\n  {escape(str(args.out.resolve()))}")
    try:
        run(args.out, llm=args.llm, console=console)
    except InputError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
