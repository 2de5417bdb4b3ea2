"""A CLI that starts fast (issue 30): whole-process wall time of ``ragbound`` commands.

``python -m benchmarks.run cli-start``: the bundled sample corpus indexed and calibrated in a
temporary folder (the default embedder runtime, so the ONNX export is made and cached there),
then each command below run as a fresh process, the commands interleaved round by round so
all see the same load, and the median wall time of each over the rounds:

- ``python -c pass`` and ``python -c "import typer, rich"``: the floors;
- ``ragbound --help`` (target: under half a second);
- ``ragbound check KB Q`` on the default runtime (ONNX) and with ``RAGBOUND_EMBED_RUNTIME=torch``;
- the baseline the issue names: a bare process that loads MiniLM with torch
  (sentence-transformers) and embeds one query.

Ratios are against that baseline, measured in the same run. ``ragbound`` is run as
``python -m ragbound.cli`` (what the console script calls) with this interpreter.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.doc import markdown_table
from benchmarks.native_guard import load_note

TITLE = "A CLI that starts fast: whole-process wall time"
RUNS = 10
TARGET_HELP_S = 0.5
QUESTION = "Who won the 1998 world cup?"
BASELINE = "baseline"
# the baseline: load MiniLM with torch and embed one query, nothing else
BASELINE_CODE = (
    "import sys; from sentence_transformers import SentenceTransformer; "
    "SentenceTransformer(sys.argv[1], device='cpu').encode([sys.argv[2]])"
)
LABELS = {
    "pass": "`python -c pass` (floor)",
    "typer": '`python -c "import typer, rich"` (floor)',
    "help": "`ragbound --help`",
    "check": "`ragbound check KB Q` (ONNX Runtime, the default)",
    "check_torch": "`RAGBOUND_EMBED_RUNTIME=torch ragbound check KB Q`",
    BASELINE: "bare process: MiniLM with torch (sentence-transformers), one query embedded",
}


def cli_start_part(runs: int = RUNS) -> dict:
    """Median seconds of each command over ``runs`` interleaved rounds, and ratios to the
    baseline."""
    from ragbound.demo import sample_corpus
    from ragbound.embedders.packaged import minilm_path
    from ragbound.embedders.registry import RUNTIME_ENV

    default_env = {name: value for name, value in os.environ.items() if name != RUNTIME_ENV}
    torch_env = default_env | {RUNTIME_ENV: "torch"}
    cli = [sys.executable, "-m", "ragbound.cli"]
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        kb = str(Path(tmp) / "kb")
        corpus = sample_corpus()
        _run([*cli, "index", str(corpus / "docs"), "--out", kb], default_env)
        _run([*cli, "calibrate", kb, "--queries", str(corpus / "in_knowledge.txt")], default_env)
        commands = {
            "pass": ([sys.executable, "-c", "pass"], default_env),
            "typer": ([sys.executable, "-c", "import typer, rich"], default_env),
            "help": ([*cli, "--help"], default_env),
            "check": ([*cli, "check", kb, QUESTION], default_env),
            "check_torch": ([*cli, "check", kb, QUESTION], torch_env),
            BASELINE: (
                [sys.executable, "-c", BASELINE_CODE, str(minilm_path()), QUESTION],
                default_env,
            ),
        }
        for args, env in commands.values():  # warm-up: page cache, compiled bytecode
            _run(args, env)
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, (args, env) in commands.items():
                seconds[name].append(_run(args, env))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "runs": runs,
        "median_s": medians,
        "ratio_to_baseline": {name: s / medians[BASELINE] for name, s in medians.items()},
        "load_average": os.getloadavg()[0],  # other jobs on the machine move the times
    }


def _run(args: list[str], env: dict[str, str]) -> float:
    """Seconds one process took, start to exit (it must succeed)."""
    start = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr[-1000:]}")
    return elapsed


def cli_start_markdown(results: dict) -> list[str]:
    """The section's Markdown lines from the saved results (none when not run)."""
    part = results.get("cli_start")
    if not part:
        return []
    medians, ratios = part["median_s"], part["ratio_to_baseline"]
    rows = [
        [
            LABELS[name],
            f"{medians[name]:.3f}",
            f"{ratios[name]:.3f}",
            f"< {TARGET_HELP_S} s" if name == "help" else "",
        ]
        for name in LABELS
    ]
    intro = (
        f"Each command as a fresh process, median of {part['runs']} interleaved rounds; the "
        "knowledge base is the bundled sample corpus (MiniLM), the query out of knowledge. "
        "`ragbound` is `python -m ragbound.cli`; the ratio is to the bare torch process in "
        "the same run." + load_note(part.get("load_average"))
    )
    header = ["command", "median s", "ratio to baseline", "target"]
    return ["", intro, "", *markdown_table(header, rows), ""]
