"""The combined statistic's word index at scale: build time, memory and search per check.

``--statistic combined`` reads, at every check, the 8 best BM25 matches of the query and the
IDF of its words from one in-memory BM25 index of every chunk
(:func:`ragbound.detect.combined.index_words`), built on first use; and it keeps the words of
the chunks it reads (up to ``TOKENIZED_CHUNKS``). This part measures that index at
``$BENCH_LEXICAL_CHUNKS`` chunks (default "100000,1000000"), each size in a child process of
its own: build seconds, peak RSS (VmHWM) and resident memory after the build, and one
query's lexical candidates (``index.search([query], 8)``) p50 / p99 over 100 PubMedQA
questions.

Texts: the PubMedQA corpus's real 200-word chunks (3,369), cycled to the size, each a string
of its own (the index is built from every chunk's text in memory, as ``corpus_words`` does).
A real corpus of that size has a larger vocabulary (rare words, names, numbers); the index's
size follows its entries (one per distinct word of a chunk), which cycling keeps realistic.

Run: ``python -m benchmarks.run lexical-scale`` (``OMP_NUM_THREADS=1`` for the published
numbers); a size alone: ``python -m benchmarks.lexical_scale N``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table
from benchmarks.memory import peak_mb
from benchmarks.million import resident_mb
from benchmarks.settings import int_list

LATENCY_QUERIES = 100
CANDIDATES = 8  # combined's OVERLAP_DEPTH
CACHE_CHUNKS = 2000  # distinct chunks whose cached words are weighed (after the timings)


def chunk_texts(n: int) -> list[str]:
    """``n`` chunk texts: the PubMedQA corpus's chunks (as ``ragbound index`` cuts them),
    cycled."""
    from ragbound.corpus import chunk_documents, load_documents

    corpus = datasets.write_pubmedqa_corpus(datasets.REPO / "bench_out" / "pubmedqa_corpus.jsonl")
    chunks = chunk_documents(
        load_documents([corpus], id_field=datasets.CORPUS_IDS)
    )  # the default chunking
    # a new string object per chunk, as reading a real corpus's chunks gives (a cycled list
    # of shared strings would leave the texts' own memory out of the peak)
    return [(chunks[i % len(chunks)].text + " ")[:-1] for i in range(n)]


def measure(n: int) -> dict:
    """Build the word index of ``n`` chunks in this process and time its search."""
    from ragbound.detect.combined import index_words
    from ragbound.embedders import load_dense_embedder

    texts = chunk_texts(n)
    questions = datasets.pubmedqa_questions()[:LATENCY_QUERIES]
    before = peak_mb()
    start = time.perf_counter()
    words = index_words(texts)
    build_s = time.perf_counter() - start
    del texts  # the index keeps no text: what stays is the index itself
    after, peak = resident_mb(), peak_mb()  # before the embedder below adds its own
    embedder = load_dense_embedder("minilm")
    embedder.encode_one(questions[0])  # loaded and warm
    search_ms, embed_ms = [], []
    for question in questions:  # interleaved: the machine's load hits both alike
        start = time.perf_counter()
        words.index.search([question], CANDIDATES)
        search_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        embedder.encode_one(question)
        embed_ms.append((time.perf_counter() - start) * 1000)
    return {
        "n_chunks": n,
        "vocabulary": len(words.idf),
        "build_s": build_s,
        "peak_mb": peak,
        "peak_before_mb": before,
        "anonymous_mb": after["anon_mb"],
        "search_p50_ms": float(np.percentile(search_ms, 50)),
        "search_p99_ms": float(np.percentile(search_ms, 99)),
        "embed_p50_ms": float(np.percentile(embed_ms, 50)),
        **word_cache_kb(words, chunk_texts(CACHE_CHUNKS)),
    }


def word_cache_kb(words, texts: list[str]) -> dict[str, float]:
    """KB a chunk that the combined score's word cache holds (vocabulary ids of the chunk and
    of its sentences), and what word sets of strings would hold (tracemalloc)."""
    import tracemalloc

    from ragbound.corpus.chunker import split_sentences
    from ragbound.stores.lexical import word_tokens

    def as_strings() -> list:
        sentences = [word_tokens(split_sentences(text) or [text]) for text in texts]
        return [
            (set(tokens), [set(s) for s in each])
            for tokens, each in zip(word_tokens(texts), sentences, strict=True)
        ]

    sizes = {}
    for name, make in (("ids", lambda: words._tokenize(texts)), ("sets", as_strings)):
        tracemalloc.start()
        kept = make()
        sizes[f"cache_kb_{name}"] = tracemalloc.get_traced_memory()[0] / len(texts) / 1024
        tracemalloc.stop()
        del kept
    return sizes


def _sizes() -> list[int]:
    return int_list("BENCH_LEXICAL_CHUNKS", "100000,1000000", 1, "100000")


def lexical_part() -> dict:
    """Every size, each in its own child process; results saved under ``lexical-scale``."""
    reason = datasets.missing_reason()
    if reason:
        return {"skipped": reason}
    rows = []
    for n in _sizes():
        cmd = [sys.executable, "-m", "benchmarks.lexical_scale", str(n)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"lexical-scale ({n} chunks) failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    return {"rows": rows, "threads": os.environ.get("OMP_NUM_THREADS", "all")}


def lexical_table(part: dict) -> tuple[list[str], list[list[str]]]:
    header = [
        "chunks",
        "vocabulary",
        "build, s",
        "peak RSS, MB (before the build)",
        "anonymous RSS after, MB",
        "lexical candidates p50 / p99, ms",
        "embedding the query alone p50, ms",
        "candidates / embedding",
        "word cache a chunk, KB (as sets of strings)",
    ]
    table = [
        [
            f"{row['n_chunks']:,}",
            f"{row['vocabulary']:,}",
            f"{row['build_s']:.1f}",
            f"{row['peak_mb']:.0f} ({row['peak_before_mb']:.0f})",
            f"{row['anonymous_mb']:.0f}",
            f"{row['search_p50_ms']:.1f} / {row['search_p99_ms']:.1f}",
            f"{row['embed_p50_ms']:.1f}",
            f"{row['search_p50_ms'] / row['embed_p50_ms']:.2f}",
            f"{row['cache_kb_ids']:.2f} ({row['cache_kb_sets']:.2f})",
        ]
        for row in part["rows"]
    ]
    return header, table


def lexical_markdown(results: dict) -> list[str]:
    part = results.get("lexical-scale")
    if not part or "rows" not in part:
        return []
    header, table = lexical_table(part)
    return [
        "The word index `--statistic combined` builds on first use (a BM25 index of every "
        "chunk and each word's IDF), over the PubMedQA corpus's real 200-word chunks cycled "
        "to the size; each size in a child process of its own, "
        f"OMP_NUM_THREADS={part['threads']}. Lexical candidates: one query's "
        f"{CANDIDATES} best BM25 matches, as each combined check reads them "
        f"({LATENCY_QUERIES} PubMedQA questions), interleaved with embedding the question "
        "alone (MiniLM, loaded after the memory was read). Word cache: what the combined "
        "score keeps of each chunk it reads (vocabulary ids of the chunk and its sentences), "
        f"over {CACHE_CHUNKS} distinct chunks with tracemalloc, and what word sets of "
        "strings would keep.",
        "",
        *markdown_table(header, table),
    ]


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
