"""Child process for the memory benchmark: index N one-sentence chunks, print peak RSS.

Run: python -m benchmarks.memory N OUT_DIR. Prints one JSON line:
{"n_chunks", "peak_mb", "before_mb", "vectors_mb", "seconds"}.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from benchmarks import datasets
from ragbound.corpus import Document, split_sentences
from ragbound.knowledge import KnowledgeBase


def peak_mb() -> float:
    """Peak resident memory of this process image, MB.

    VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec, so a child started by
    a 1.4 GB parent would report the parent's peak.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def sentences(n: int) -> list[str]:
    """N distinct one-sentence texts cycled from the PubMedQA abstracts."""
    corpus = [
        s
        for record in datasets._pubmedqa().values()
        for context in record["CONTEXTS"]
        for s in split_sentences(context)
    ]
    return [f"{corpus[i % len(corpus)]} (variant {i // len(corpus)})" for i in range(n)]


def main() -> None:
    n, out = int(sys.argv[1]), Path(sys.argv[2])
    docs = [Document(id=f"s{i}", text=t, source="synthetic") for i, t in enumerate(sentences(n))]
    before_mb = peak_mb()
    start = time.perf_counter()
    kb = KnowledgeBase.from_documents(docs, embedder="minilm")
    kb.save(out, overwrite=True)
    print(
        json.dumps(
            {
                "n_chunks": len(kb),
                "peak_mb": peak_mb(),
                "before_mb": before_mb,
                "vectors_mb": kb.vectors.nbytes / 2**20,
                "seconds": time.perf_counter() - start,
            }
        )
    )


if __name__ == "__main__":
    main()
