"""A million chunks on one machine: float16 vs float32 quality, then build, memory and check speed.

Part ``million`` of ``python -m benchmarks.run``. Two measurements:

1. **What float16 storage costs**, on the real PubMedQA knowledge base (MiniLM): AUROC of
   every statistic against MMLU-Med (near) and TruthfulQA (far) out-of-knowledge queries,
   calibrated and evaluated as in the main table, with the vectors stored as float32 and as
   float16.
2. **Scale**: a knowledge base of ``$BENCH_MILLION_CHUNKS`` chunks (default 1,000,000) per
   storage type. Embedding a million chunks with MiniLM takes hours on this machine, so it is
   made from the PubMedQA corpus's real MiniLM vectors (its 3,369 chunks, kept as they are)
   extended with synthesised ones: a real vector plus Gaussian noise (sigma
   ``NOISE`` per coordinate), renormalised, each carrying the text of the chunk it was made
   from (so the chunk file and the chunks in memory have real sizes). In one child
   process it is written (``KnowledgeBase.save``: vectors, chunks, checksums); in another it
   is loaded (vectors memory-mapped, checksums and finiteness verified), calibrated with the
   500 PubMedQA calibration questions and checked one query at a time, interleaved with
   embedding the query alone. Each child reports its peak RSS (VmHWM), and its anonymous
   and file-backed resident memory at the end: the mapped vector file is file-backed (page
   cache the kernel can reclaim), the chunks and the model are anonymous.

Run: ``python -m benchmarks.run million`` (``OMP_NUM_THREADS=1`` for the published numbers).
Environment: ``BENCH_MILLION_CHUNKS`` (default 1000000), ``BENCH_MILLION_DTYPES`` (default
"float32,float16"), ``BENCH_MILLION_QUERIES`` (checks timed, default 100).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.doc import markdown_table
from benchmarks.memory import peak_mb
from ragbound.artifacts import utc_now
from ragbound.corpus import Chunk
from ragbound.knowledge import SEGMENTS, KnowledgeBase, Segment, corpus_hash, staging_dir

NOISE = 0.02  # per coordinate: a synthesised vector keeps cosine ~0.93 with its source
_SYNTH_BLOCK = 65_536  # vectors synthesised and written per block (bounded memory)
_SEED = 17


# ---------------------------------------------------------------- float16 quality (parent)
def storage_quality(
    kb: KnowledgeBase, calibration: list[str], ik_test: list[str], ook: dict[str, list[str]]
) -> dict:
    """AUROC per statistic and out-of-knowledge set with float32 and float16 vectors."""
    from ragbound.detect import Guard
    from ragbound.detect.evaluate import evaluate

    aurocs: dict[str, dict[str, dict[str, float]]] = {}
    for dtype in ("float32", "float16"):
        stored = with_vector_dtype(kb, dtype)
        guard = Guard.calibrate(stored, calibration, k=32)
        aurocs[dtype] = {
            name: {
                stat: m["auroc"]
                for stat, m in evaluate(guard, ik_test, queries, samples=300, runs=10, seed=0)
                .model_dump()["statistics"]
                .items()
            }
            for name, queries in ook.items()
        }
    diffs = [
        abs(aurocs["float16"][name][stat] - value)
        for name, stats in aurocs["float32"].items()
        for stat, value in stats.items()
    ]
    return {"auroc": aurocs, "max_abs_diff": max(diffs), "n_chunks": len(kb)}


def with_vector_dtype(kb: KnowledgeBase, dtype: str) -> KnowledgeBase:
    """The same knowledge base with its vectors stored as ``dtype`` (unsaved, in memory)."""
    manifest = kb.manifest.model_copy(update={"vector_dtype": dtype})
    return KnowledgeBase(manifest, kb.chunks, np.asarray(kb.vectors), embedder=kb.embedder)


# ----------------------------------------------------------------------- build (child)
def synthesise(base: KnowledgeBase, n: int, dtype: str, out: Path) -> dict:
    """Write an ``n``-chunk knowledge base made from ``base``'s real vectors (see module doc)."""
    start = time.perf_counter()
    real = np.asarray(base.vectors, dtype=np.float32)
    sources = np.arange(n) % len(base)
    chunks = [_synthetic_chunk(base.chunks[int(s)], i, len(base)) for i, s in enumerate(sources)]
    scratch = out.parent / f"{out.name}.vectors.npy"  # stored type: no full-size conversion
    shape = (n, real.shape[1])
    vectors = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.dtype(dtype), shape=shape)
    rng = np.random.default_rng(_SEED)
    for first in range(0, n, _SYNTH_BLOCK):
        rows = np.arange(first, min(n, first + _SYNTH_BLOCK))
        block = real[sources[rows]]
        noisy = rows >= len(base)  # the first len(base) rows are the real vectors themselves
        block[noisy] += rng.normal(scale=NOISE, size=(int(noisy.sum()), real.shape[1]))
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        vectors[rows] = block
    vectors.flush()
    del vectors  # unmapped: the knowledge base maps the file again, read-only
    manifest = base.manifest.model_copy(
        update={
            "segments": [
                Segment(
                    name="000001",
                    n_chunks=n,
                    n_documents=n,
                    sources=[f"PubMedQA MiniLM vectors + synthesised (noise {NOISE})"],
                    created_at=utc_now(),
                )
            ],
            "n_chunks": n,
            "n_documents": n,
            "corpus_hash": corpus_hash(chunks),
            "vector_dtype": dtype,
        }
    )
    kb = KnowledgeBase(manifest, chunks, np.load(scratch, mmap_mode="r"))
    synth_s = time.perf_counter() - start
    start = time.perf_counter()
    kb.save(out, overwrite=True)
    write_s = time.perf_counter() - start
    scratch.unlink()
    return {
        "n_chunks": n,
        "dtype": dtype,
        "synthesise_s": synth_s,
        "write_s": write_s,
        "vector_file_mb": _segment_file_mb(out, ".vectors.npy"),
        "chunk_file_mb": _segment_file_mb(out, ".chunks.jsonl"),
        "peak_mb": peak_mb(),
        **resident_mb(),
    }


def _synthetic_chunk(source: Chunk, row: int, n_real: int) -> Chunk:
    if row < n_real:
        return source
    return source.model_copy(
        update={"id": f"{source.id}~{row}", "doc_id": f"{source.doc_id}~{row}", "source": "synth"}
    )


def _segment_file_mb(kb_dir: Path, suffix: str) -> float:
    return sum(p.stat().st_size for p in (kb_dir / SEGMENTS).glob(f"*{suffix}")) / 2**20


def resident_mb() -> dict[str, float]:
    """This process's resident memory now, MB: anonymous (its own heap) and file-backed
    (mapped files, e.g. memory-mapped vectors; page cache the kernel may reclaim)."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(":")[0]
            if key in ("RssAnon", "RssFile"):
                values[f"{key[3:].lower()}_mb"] = int(line.split()[1]) / 1024
    return values


# ----------------------------------------------------------------------- query (child)
def measure_checks(kb_dir: Path, calibration: list[str], queries: list[str]) -> dict:
    """Load, calibrate and time checks against the big knowledge base (exact search)."""
    from benchmarks.run import latency
    from ragbound.detect import Guard

    # first, and unmapped again before the load: a second mapping would count twice in RSS
    verify_s = verification_seconds(kb_dir)
    start = time.perf_counter()
    kb = KnowledgeBase.load(kb_dir)
    load_s = time.perf_counter() - start
    after_load = resident_mb()
    start = time.perf_counter()
    guard = Guard.calibrate(kb, calibration, k=32)
    calibrate_s = time.perf_counter() - start
    timing = latency(guard, queries)
    vectors = kb.embed(queries[:20])
    search_ms = []
    for vector in vectors:
        began = time.perf_counter()
        kb.store.search(vector[None, :], 32)
        search_ms.append((time.perf_counter() - began) * 1e3)
    return {
        "load_s": load_s,
        "verify_s": verify_s,
        "calibrate_s": calibrate_s,
        "n_calibration": len(calibration),
        "search_p50_ms": float(np.percentile(search_ms, 50)),
        **timing,
        "after_load": after_load,
        "peak_mb": peak_mb(),
        **resident_mb(),
    }


def verification_seconds(kb_dir: Path) -> float:
    """Seconds the load's integrity checks take: SHA-256 of the segment files (as
    ``check_sha256`` reads them) and the finite-values pass over the mapped vectors."""
    start = time.perf_counter()
    for path in sorted((kb_dir / SEGMENTS).iterdir()):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    for path in (kb_dir / SEGMENTS).glob("*.vectors.npy"):
        vectors = np.load(path, mmap_mode="r")
        for first in range(0, len(vectors), 65_536):
            np.isfinite(vectors[first : first + 65_536]).all()
    return time.perf_counter() - start


def hnsw_check_row(kb_dir: Path, calibration: list[str], queries: list[str]) -> dict | None:
    """The approximate (HNSW) row of the million-chunk table: None until the local HNSW store
    (issue 17 part 2) is merged. It should return what :func:`measure_checks` returns, with
    the knowledge base searched through that store (calibrated with the same search)."""
    del kb_dir, calibration, queries
    return None


# ------------------------------------------------------------------------ parent
def pubmedqa_kb(out: Path, corpus: Path) -> KnowledgeBase:
    """The MiniLM PubMedQA knowledge base at ``out/kb-minilm`` (the main run saves it there),
    built and saved when absent or made from another corpus."""
    from ragbound.corpus import ChunkingParams, chunk_documents, load_documents

    chunking = ChunkingParams()
    chunks = chunk_documents(
        load_documents([corpus]), chunk_words=chunking.chunk_words, overlap=chunking.overlap
    )
    kb_dir = out / "kb-minilm"
    if (kb_dir / "manifest.json").is_file():
        kb = KnowledgeBase.load(kb_dir)
        if kb.manifest.corpus_hash == corpus_hash(chunks) and kb.manifest.embedder_spec == "minilm":
            return kb
    kb = KnowledgeBase.build([corpus], embedder="minilm", staging=staging_dir(kb_dir))
    kb.save(kb_dir, overwrite=True)
    return kb


def million_part(
    out: Path,
    corpus: Path,
    calibration: list[str],
    ik_test: list[str],
    ook: dict[str, list[str]],
) -> dict:
    """Both measurements (module doc) on the PubMedQA ``corpus``; files go under ``out``."""
    base = pubmedqa_kb(out, corpus)
    n = int(os.environ.get("BENCH_MILLION_CHUNKS", "1000000"))
    dtypes = os.environ.get("BENCH_MILLION_DTYPES", "float32,float16").split(",")
    n_queries = int(os.environ.get("BENCH_MILLION_QUERIES", "100"))
    part: dict = {"quality": storage_quality(base, calibration, ik_test, ook), "scale": {}}
    queries_file = out / "million-queries.json"
    checks = ik_test[: n_queries // 2] + ook["TruthfulQA"][: n_queries - n_queries // 2]
    queries_file.write_text(json.dumps({"calibration": calibration, "queries": checks}))
    for dtype in dtypes if n else []:  # BENCH_MILLION_CHUNKS=0: the quality table only
        kb_dir = out / f"kb-million-{dtype}"
        build = _child("build", str(n), dtype, str(base.path), str(kb_dir))
        check = _child("query", str(kb_dir), str(queries_file))
        part["scale"][dtype] = {"build": build, "exact": check}
        hnsw = hnsw_check_row(kb_dir, calibration, checks)
        if hnsw is not None:
            part["scale"][dtype]["hnsw"] = hnsw
    return part


def _child(*args: str) -> dict:
    """Run this module in a fresh process (its own peak RSS) and read its JSON line."""
    cmd = [sys.executable, "-m", "benchmarks.million", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"million-chunk benchmark ({args[0]}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def million_rows(part: dict) -> tuple[list[str], list[list[str]]]:
    """The scale table: one row per measure, a column per storage type."""
    scale = part["scale"]
    dtypes = list(scale)
    header = ["measure", *dtypes, "target"]

    def row(label: str, target: str, value) -> list[str]:
        return [label, *(value(scale[d]) for d in dtypes), target]

    first = next(iter(scale.values()))
    rows = [
        row("chunks (real PubMedQA + synthesised)", "", lambda s: f"{s['build']['n_chunks']:,}"),
        row(
            "write time (save: vectors, chunks, SHA-256), s",
            "",
            lambda s: f"{s['build']['write_s']:.1f}",
        ),
        row("vector file, MB", "", lambda s: f"{s['build']['vector_file_mb']:.0f}"),
        row("peak RSS writing, MB", "< 2500", lambda s: f"{s['build']['peak_mb']:.0f}"),
        row("load (mapped, verified), s", "", lambda s: f"{s['exact']['load_s']:.1f}"),
        row(
            "of which integrity checks (SHA-256 + finite), s",
            "",
            lambda s: f"{s['exact']['verify_s']:.1f}",
        ),
        row(
            f"calibrate {first['exact']['n_calibration']} queries (exact), s",
            "",
            lambda s: f"{s['exact']['calibrate_s']:.1f}",
        ),
        row(
            "peak RSS loading + calibrating + checking, MB",
            "< 2500",
            lambda s: f"{s['exact']['peak_mb']:.0f}",
        ),
        row(
            "  after load: anonymous (chunks, runtime) / file-backed (mapped vectors), MB",
            "",
            lambda s: (
                f"{s['exact']['after_load']['anon_mb']:.0f} / "
                f"{s['exact']['after_load']['file_mb']:.0f}"
            ),
        ),
        row(
            "  at the end: anonymous (+ model) / file-backed, MB",
            "",
            lambda s: f"{s['exact']['anon_mb']:.0f} / {s['exact']['file_mb']:.0f}",
        ),
        row("exact search alone, k=32, p50 ms", "", lambda s: f"{s['exact']['search_p50_ms']:.1f}"),
        row("check p50 (exact), ms", "", lambda s: f"{s['exact']['check_p50_ms']:.1f}"),
        row("check p99 (exact), ms", "", lambda s: f"{s['exact']['check_p99_ms']:.1f}"),
        row(
            "embedding the query alone, p50 ms (same run)",
            "",
            lambda s: f"{s['exact']['embed_p50_ms']:.1f}",
        ),
        row("check p50 / embedding p50 (exact)", "", lambda s: f"{s['exact']['ratio_p50']:.2f}"),
    ]
    if all("hnsw" in s for s in scale.values()):
        rows.append(
            row(
                "check p50 / embedding p50 (HNSW)",
                "<= 1.5",
                lambda s: f"{s['hnsw']['ratio_p50']:.2f}",
            )
        )
    return header, rows


def quality_rows(part: dict) -> tuple[list[str], list[list[str]]]:
    """AUROC with float32 and float16 vectors, per statistic and out-of-knowledge set."""
    auroc = part["quality"]["auroc"]
    sets = list(auroc["float32"])
    header = ["statistic"] + [f"{s} AUROC {d}" for s in sets for d in ("float32", "float16")]
    rows = [
        [stat] + [f"{auroc[d][s][stat]:.4f}" for s in sets for d in ("float32", "float16")]
        for stat in auroc["float32"][sets[0]]
    ]
    return header, rows


def million_markdown(results: dict) -> list[str]:
    part = results.get("million")
    if not part:
        return []
    q = part["quality"]
    header, rows = quality_rows(part)
    lines = [
        f"**float16 vs float32 vectors** on the real PubMedQA knowledge base ({q['n_chunks']:,} "
        "chunks, MiniLM), 500 calibration questions, 10 runs x 300 per side: largest AUROC "
        f"difference {q['max_abs_diff']:.4f}.",
        "",
        *markdown_table(header, rows),
        "",
    ]
    if part["scale"]:
        header, rows = million_rows(part)
        lines += [
            "**A million chunks**, exact search in blocks of 65,536 rows over memory-mapped "
            "vectors. Not a real million-chunk corpus: the PubMedQA corpus's real MiniLM "
            "vectors, extended with synthesised ones (a real vector plus Gaussian noise, "
            f"sigma {NOISE} per coordinate, renormalised), each with the text of its source "
            "chunk. Each column is two child processes (write; load + calibrate + check), "
            f"{os.environ.get('OMP_NUM_THREADS', 'all')} thread(s). Checks: one query at a "
            "time, interleaved with embedding the query alone.",
            "",
            *markdown_table(header, rows),
            "",
        ]
    return lines


def _main() -> None:
    command, *args = sys.argv[1:]
    if command == "build":
        n, dtype, base_dir, out = int(args[0]), args[1], Path(args[2]), Path(args[3])
        result = synthesise(KnowledgeBase.load(base_dir), n, dtype, out)
    elif command == "query":
        data = json.loads(Path(args[1]).read_text())
        result = measure_checks(Path(args[0]), data["calibration"], data["queries"])
    else:
        raise SystemExit(f"unknown command {command!r}: build or query")
    print(json.dumps(result))


if __name__ == "__main__":
    _main()
