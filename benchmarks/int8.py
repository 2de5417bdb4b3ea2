"""Dynamic int8 MiniLM against the fp32 ONNX default on the corpus zoo (issue 30).

The exported fp32 graph (:func:`ragbound.embedders.onnx_export.exported_model`) is quantized
with ONNX Runtime's ``quantize_dynamic`` (int8 weights, per channel; activations quantized at
run time) into bench_out/int8/, and run by the same :class:`OnnxRunner` as the default. Each
zoo corpus (benchmarks/zoo.py's knowledge bases and splits, one seed, ``BENCH_INT8_SEED``,
default 0) is indexed twice, chunks and queries embedded by fp32 or by int8; the default guard
(``Guard.calibrate(kb, calibration)``, MSS) is measured on each with :func:`zoo.measure`.
Also: the cosine between the two runtimes' vectors of the split's test questions (and of a
per-tensor quantization, to show why per channel), and the one-query embed latency p50 of
both on 200 queries, interleaved, one thread. Verdict: int8 is offered only if, on every
corpus, it loses at most :data:`AUROC_TOLERANCE` AUROC and its held-out FPR stays within
:data:`FPR_TOLERANCE` of fp32's.

``python -m benchmarks.run int8`` (``int8 render``: the section again from bench_out/int8.json).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks import datasets, near, zoo
from benchmarks.doc import markdown_table, write_section
from benchmarks.settings import int_value
from benchmarks.timing import interleaved_ms
from ragbound.artifacts import write_json
from ragbound.detect import Guard
from ragbound.embedders import load_dense_embedder, set_cpu_threads
from ragbound.embedders.onnx import OnnxEmbedder
from ragbound.embedders.onnx_export import exported_model
from ragbound.embedders.onnx_runner import OnnxRunner
from ragbound.knowledge import KnowledgeBase

OUT = datasets.REPO / "bench_out"
CACHE = OUT / "int8"
CORPORA = ("PubMedQA", "PubMedQA-half", "COVID-QA halves", "BANKING77-OOS", "CLAP NQ")
AUROC_TOLERANCE = 0.005
FPR_TOLERANCE = 0.01
LATENCY_QUERIES = 200
MEASURES = {
    "auroc": "AUROC (in vs near)",
    "fpr": f"held-out FPR at {zoo.ALPHA}",
    "flagged": f"near flagged at {zoo.ALPHA}",
    "far_auroc": f"{zoo.FAR} AUROC",
    "far_flagged": f"{zoo.FAR} flagged",
}
TITLE = "Dynamic int8 MiniLM against the fp32 ONNX default"


class QuantizedEmbedder(OnnxEmbedder):
    """``base``'s tokenizer and pooling (the same :class:`OnnxRunner`) on another graph."""

    def __init__(self, base: OnnxEmbedder, model: Path):
        super().__init__(base.folder, base.layout, name=base.name)
        self.model = model

    def runner(self) -> OnnxRunner:
        if self._runner is None:
            self._runner = OnnxRunner(self.model, self.folder, self.layout)
        return self._runner


def quantized(base: OnnxEmbedder, per_channel: bool) -> QuantizedEmbedder:
    """``base``'s exported graph, int8 weights (QInt8), cached under bench_out/int8/."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = exported_model(base.folder, base.layout)
    target = CACHE / f"{source.parent.name}-int8{'-per-channel' if per_channel else ''}.onnx"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=per_channel)
    return QuantizedEmbedder(base, target)


def knowledge_base(name: str, variant: str, embedder: OnnxEmbedder) -> tuple[KnowledgeBase, dict]:
    """zoo's knowledge base ``name`` with every chunk embedded by ``embedder``. Building takes
    a spec, not an embedder object: the int8 one is handed in where the spec's is loaded."""
    folder, documents = zoo.KB_FOLDERS[name]
    with mock.patch("ragbound.knowledge.base.load_dense_embedder", lambda *_, **__: embedder):
        kb, seconds = near.cached_kb(
            CACHE / f"{folder}-{variant}", documents(OUT), embedder, zoo.SPEC, zoo.GRANULARITY
        )
    return kb, {"seconds": seconds}


def cosines(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Mean and min row-wise cosine of two sets of unit vectors."""
    cos = np.sum(a * b, axis=1)
    return {"mean": float(np.mean(cos)), "min": float(np.min(cos)), "n": len(cos)}


def worst_loss(rows: dict[str, dict[str, dict]]) -> tuple[str, float]:
    """The corpus where int8 loses the most AUROC against fp32, and that loss."""
    losses = {c: r["fp32"]["auroc"] - r["int8"]["auroc"] for c, r in rows.items()}
    corpus = max(losses, key=losses.__getitem__)
    return corpus, losses[corpus]


def failures(
    rows: dict[str, dict[str, dict]],
    auroc_tolerance: float = AUROC_TOLERANCE,
    fpr_tolerance: float = FPR_TOLERANCE,
) -> list[str]:
    """Where int8 breaks a tolerance: an AUROC loss above ``auroc_tolerance`` or an FPR more
    than ``fpr_tolerance`` from fp32's (``rows``: corpus -> {"fp32": .., "int8": measures})."""
    found = []
    for corpus, r in rows.items():
        loss = r["fp32"]["auroc"] - r["int8"]["auroc"]
        shift = r["int8"]["fpr"] - r["fp32"]["fpr"]
        if loss > auroc_tolerance:
            found.append(f"{corpus} (AUROC loss {loss:+.4f})")
        if abs(shift) > fpr_tolerance:
            found.append(f"{corpus} (FPR {shift:+.4f})")
    return found


def offered(rows: dict[str, dict[str, dict]]) -> bool:
    """int8 is offered: measured on some corpus and within both tolerances on every one."""
    return bool(rows) and not failures(rows)


def int8_part(seed: int, corpora: Sequence[str] = CORPORA) -> dict:
    set_cpu_threads(1)  # before any session is opened
    fp32 = load_dense_embedder(zoo.SPEC, runtime="onnx")
    assert isinstance(fp32, OnnxEmbedder)
    embedders = {"fp32": fp32, "int8": quantized(fp32, per_channel=True)}
    per_tensor = quantized(fp32, per_channel=False)
    results: dict = {"seed": seed, "rows": {}, "cosine": {}, "build_s": {}, "skipped": {}}
    kbs: dict[str, dict[str, KnowledgeBase]] = {}
    latency_pool: list[list[str]] = []
    for corpus in corpora:
        if reason := zoo.missing_reason(corpus):
            results["skipped"][corpus] = reason
            continue
        name = zoo.KB_OF[corpus]
        if name not in kbs:
            kbs[name] = {}
            for variant, embedder in embedders.items():
                kbs[name][variant], build = knowledge_base(name, variant, embedder)
                results["build_s"].setdefault(name, {})[variant] = build["seconds"]
        row: dict[str, dict] = {}
        for variant in embedders:
            split = zoo.SPLITS[corpus](kbs[name][variant], seed)
            split.far = split.far or datasets.truthfulqa_questions()
            row[variant] = zoo.measure(Guard.calibrate(split.kb, split.calibration), split)
        results["rows"][corpus] = row
        tests = [*split.inside, *split.near, *split.far]
        base = fp32.encode(tests)
        results["cosine"][corpus] = {
            "per channel": cosines(embedders["int8"].encode(tests), base),
            "per tensor": cosines(per_tensor.encode(tests), base),
        }
        latency_pool.append(split.inside)
        print(f"{corpus}: {json.dumps(row)}", flush=True)
    queries = [q for group in zip(*latency_pool, strict=False) for q in group][:LATENCY_QUERIES]
    calls = [embedders["fp32"].encode_one, embedders["int8"].encode_one]
    interleaved_ms(calls, queries[:5])  # warm-up
    fp32_ms, int8_ms = interleaved_ms(calls, queries)
    p50 = {"fp32": float(np.median(fp32_ms)), "int8": float(np.median(int8_ms))}
    results["latency"] = p50 | {"n": len(queries), "ratio": p50["int8"] / p50["fp32"]}
    return results


def _cell(value: float | None, diff: bool = False) -> str:
    return "" if value is None else (f"{value:+.4f}" if diff else f"{value:.3f}")


def int8_markdown(results: dict) -> list[str]:
    rows = results["rows"]
    corpus, loss = worst_loss(rows)
    lat = results["latency"]
    verdict = (
        "offer int8: it stays within the tolerances on every corpus"
        if offered(rows)
        else "keep fp32: int8 breaks a tolerance on " + ", ".join(failures(rows))
    )
    losses = [r["fp32"]["auroc"] - r["int8"]["auroc"] for r in rows.values()]
    lines = [
        "Dynamic quantization (`onnxruntime.quantization.quantize_dynamic`, QInt8 weights, per "
        "channel; activations quantized per batch at run time) of the exported fp32 MiniLM "
        "graph, run by the same `OnnxRunner`. Each corpus is indexed twice (chunks and queries "
        "by fp32, or by int8), the default guard (`Guard.calibrate`, MSS) calibrated on its "
        f"split (seed {results['seed']}) and checked at alpha = {zoo.ALPHA}; int8 - fp32: "
        "positive AUROC is a gain. Verdict rule: offer int8 only if on every corpus its AUROC "
        f"loss is <= {AUROC_TOLERANCE} and its held-out FPR within {FPR_TOLERANCE} of fp32's.",
        "",
        f"**Verdict: {verdict}.** Worst corpus: {corpus} (AUROC loss {loss:+.4f}); mean loss "
        f"over {len(rows)} corpora {np.mean(losses):+.4f}. One-query embed latency p50 "
        f"({lat['n']} queries, interleaved, 1 thread): fp32 {lat['fp32']:.2f} ms, int8 "
        f"{lat['int8']:.2f} ms, ratio int8 / fp32 {lat['ratio']:.2f}.",
    ]
    if results["skipped"]:
        lines += ["", "Left out: " + "; ".join(f"{c}: {r}" for c, r in results["skipped"].items())]
    for name, row in rows.items():
        table = [
            [label, _cell(a := row["fp32"][m]), _cell(b := row["int8"][m]), _cell(b - a, True)]
            for m, label in MEASURES.items()
            if m in row["fp32"]
        ]
        lines += [
            "",
            f"**{name}**",
            "",
            *markdown_table(["measure", "fp32", "int8", "int8 - fp32"], table),
        ]
    header = ["corpus", "test questions", "per channel: mean", "min", "per tensor: mean", "min"]
    table = [
        [c, f"{found['per channel']['n']:,}"]
        + [_cell(found[k][s]) for k in ("per channel", "per tensor") for s in ("mean", "min")]
        for c, found in results["cosine"].items()
    ]
    lines += [
        "",
        "**Cosine between int8 and fp32 vectors of the test questions** (in-knowledge test, "
        "near and far; per tensor: the same quantization without per-channel scales, not "
        "benchmarked further)",
        "",
        *markdown_table(header, table),
    ]
    builds = [
        [name] + [_seconds(found.get(v)) for v in ("fp32", "int8")]
        for name, found in results["build_s"].items()
    ]
    lines += ["", "**Index build, s** (1 thread)", ""]
    return lines + markdown_table(["knowledge base", "fp32", "int8"], builds)


def _seconds(value: float | None) -> str:
    return "cached (built in an earlier run)" if value is None else f"{value:.0f}"


def main(argv: Sequence[str] = ()) -> dict:
    """Measure (or ``render``: from bench_out/int8.json), save, write the ``int8`` section."""
    if list(argv) == ["render"]:
        results = json.loads((OUT / "int8.json").read_text())  # saved with sorted keys
        for key, order in (("rows", CORPORA), ("cosine", CORPORA), ("build_s", zoo.KB_FOLDERS)):
            results[key] = {c: results[key][c] for c in order if c in results[key]}
    elif argv:
        raise SystemExit(f"benchmarks.int8: unknown arguments {list(argv)}; give none or render")
    else:
        corpora = os.environ.get("BENCH_INT8_CORPORA", ",".join(CORPORA)).split(",")
        results = int8_part(int_value("BENCH_INT8_SEED", "0", 0, "0"), corpora)
        write_json(OUT / "int8.json", results)
    lines = int8_markdown(results)
    print("\n".join(lines))
    print(f"written to {write_section('int8', TITLE, chr(10).join(lines))}")
    return results
