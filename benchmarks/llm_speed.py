"""Local LLM speed: our batched generation against a bare llama-cpp-python loop, one run.

Both generate replies to the same synthetic-query prompts with the same parameters, on the
same loaded llama.cpp instance: two instances of one model differed by up to 15% in tokens/s
here, which would swamp the stack's overhead. The bare loop runs on the main thread, as a user
would write it; ours runs on the model's own thread (see LocalLlama). Passes alternate (bare,
ours, bare, ours, ...), each going through all prompts in order, so both see the same machine
load and the same prompt-prefix reuse; tokens/s is completion tokens over wall time, summed
over the passes. Ours goes through the whole stack (prompt rendering, response cache with a
fresh directory, bounded concurrency, provenance), so the ratio is the stack's overhead. Also
timed: a warm-cache rerun of ``ragbound synth`` for 300 queries, as a user runs it (a new
process).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragbound.knowledge import KnowledgeBase
from ragbound.llm import (
    CachedLLM,
    GenerationParams,
    Request,
    ResponseCache,
    builtin_examples,
    load_prompt,
    run_batch,
)
from ragbound.llm.local import LocalLlama
from ragbound.synth.queries import ContextWindows, synth_requests

N_PROMPTS = 6
PASSES = 3


def speed_requests(kb: KnowledgeBase, n: int = N_PROMPTS) -> list[Request]:
    """``n`` synth prompts on chunks drawn with a seed the benchmarks use nowhere else."""
    prompt = load_prompt("synth-query")
    params = GenerationParams(temperature=0.7, max_tokens=160, seed=777)
    rows = range(len(kb) - n, len(kb))
    texts = [ContextWindows(kb, "pmid").text(row) for row in rows]
    examples = builtin_examples("pubmed")
    return synth_requests(texts, rows, prompt=prompt, examples=examples, params=params)


def generation_speed(kb: KnowledgeBase) -> dict:
    """Tokens/s of a bare ``create_chat_completion`` loop and of our ``run_batch``."""
    requests = speed_requests(kb)
    ours_model = LocalLlama(n_ctx=4096)
    ours_model.load()
    bare = ours_model._llama  # the same llama.cpp instance, driven without our stack
    totals = {"bare": [0, 0.0], "ours": [0, 0.0]}
    for _ in range(PASSES):
        tokens, seconds = _bare_pass(bare, requests)
        totals["bare"][0] += tokens
        totals["bare"][1] += seconds
        with tempfile.TemporaryDirectory() as cache_dir:  # no hits: every call generates
            tokens, seconds = _our_pass(
                CachedLLM(ours_model, ResponseCache(Path(cache_dir))), requests
            )
        totals["ours"][0] += tokens
        totals["ours"][1] += seconds
    bare_tps = totals["bare"][0] / totals["bare"][1]
    ours_tps = totals["ours"][0] / totals["ours"][1]
    return {
        "prompts": len(requests),
        "passes": PASSES,
        "bare_tokens_per_s": bare_tps,
        "ours_tokens_per_s": ours_tps,
        "ratio": ours_tps / bare_tps,
    }


def _bare_pass(llama, requests: list[Request]) -> tuple[int, float]:
    tokens = 0
    start = time.perf_counter()
    for request in requests:
        p = request.params
        reply = llama.create_chat_completion(
            messages=[m.model_dump() for m in request.messages],
            temperature=p.temperature,
            max_tokens=p.max_tokens,
            seed=p.seed,
            top_p=p.top_p,
            stop=p.stop,
        )
        tokens += reply["usage"]["completion_tokens"]
    return tokens, time.perf_counter() - start


def _our_pass(llm: CachedLLM, requests: list[Request]) -> tuple[int, float]:
    start = time.perf_counter()
    results = run_batch(llm, requests, concurrency=4)
    seconds = time.perf_counter() - start
    tokens = sum(r.response.completion_tokens or 0 for r in results if r.response)
    return tokens, seconds


def warm_synth_seconds(kb_dir: Path, n: int = 300) -> float:
    """Wall time of ``ragbound synth KB --n n`` in a new process, after a first (warming) run."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "ragbound.cli", "synth", str(kb_dir), "--n", str(n)]
        cmd += ["--group-by", "pmid"]  # as the benchmark generated them: cached
        cmd += ["--out", str(Path(tmp) / "q.jsonl"), "--json"]
        subprocess.run(cmd, check=True, capture_output=True)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - start
