"""``make demo``: the main job end to end on the bundled sample corpus, fully offline.

Indexes the bundled field guide with MiniLM, calibrates on half of its in-knowledge
questions, checks held-out and out-of-knowledge questions, and evaluates every statistic.
The knowledge base is left in ``demo_out/kb`` for you to query with ``ragbound check``.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from rich.console import Console

from ragbound.corpus import load_queries
from ragbound.detect import Guard
from ragbound.detect.evaluate import evaluate, split_queries
from ragbound.display import evaluation_table, verdict_table
from ragbound.knowledge import KnowledgeBase
from ragbound.progress import progress_wanted

DEMO_K = 8


def sample_corpus() -> Path:
    """Folder of the bundled sample corpus (docs/, in_knowledge.txt, out_of_knowledge.txt)."""
    return Path(str(resources.files("ragbound") / "sample_corpus"))


def run(out: Path) -> None:
    console = Console()
    root = sample_corpus()
    show = progress_wanted()
    console.rule("[bold]1. index the bundled field guide (all-MiniLM-L6-v2, offline)")
    kb = KnowledgeBase.build([root / "docs"], embedder="minilm", progress=show)
    kb.save(out, overwrite=True)
    console.print(f"{kb.manifest.n_documents} documents -> {len(kb)} chunks in {out}")

    console.rule("[bold]2. calibrate on half of the in-knowledge questions")
    in_knowledge = load_queries(root / "in_knowledge.txt")
    out_of_knowledge = load_queries(root / "out_of_knowledge.txt")
    calibration, held_out = split_queries(in_knowledge, 0.5, seed=0)
    guard = Guard.calibrate(kb, calibration, k=DEMO_K, queries_source="in_knowledge.txt")
    guard.save()
    detector = guard.detector()
    console.print(
        f"{len(calibration)} calibration queries, statistic {detector.statistic}, k={DEMO_K}; "
        f"critical value at alpha=0.05: {detector.critical_value_:.4f}"
    )

    console.rule("[bold]3. check held-out in-knowledge and out-of-knowledge questions")
    examples = held_out[:4] + out_of_knowledge[:2] + out_of_knowledge[-2:]
    really = ["answerable"] * 4 + ["far off-topic"] * 2 + ["near off-topic"] * 2
    console.print(verdict_table(guard.check_many(examples), expected=really))

    console.rule("[bold]4. evaluate every statistic (paper protocol)")
    # 40 of the 60 per side, so the 10 runs are different draws
    report = evaluate(guard, held_out, out_of_knowledge, samples=40, runs=10, seed=0)
    console.print(evaluation_table(report))
    console.print(
        f'\nTry it: [bold].venv/bin/ragbound check {out} "How does BM25 score a chunk?"[/]'
    )


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("demo_out") / "kb"
    run(out)


if __name__ == "__main__":
    main()
