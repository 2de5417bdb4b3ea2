"""``make bench-serve``: the HTTP service against in-process ``Gate.decide``, in one run.

Set-up: the PubMedQA corpus (minilm) calibrated on half the PubMedQA questions (k = 32, as in
``make bench``), with seed 0's HarmfulQA tripwires (benchmarks/tripwires.py) under the default
tripwire rule, so every decision runs the knowledge test and the tripwires. It is built once
into bench_out/kb-serve and reused. Queries are a seeded mix of held-out questions: the other
half of PubMedQA (mostly ``answer``), TruthfulQA (mostly ``abstain``) and HarmfulQA's in-topic
test quarter (mostly ``reject``).

For each setting (one process with ``--threads`` N, default 1; then ``--workers 2`` with one
thread each, the two cores) a fresh ``ragbound serve KB --log FILE --threads N [--workers W]``
child runs on loopback (the embedder on ONNX Runtime, the default; OMP/MKL_NUM_THREADS removed
from its environment), and is warmed up by 256 requests from 64 clients. Then:

- one client: each query is decided in-process (``Gate.decide``, this process set to the same
  thread count) and sent to the server, alternately, so both see the same machine load;
  before each, a ``GET /healthz`` (a round trip that decides nothing), and after the level
  an fsync probe on the log's disk: together the floor under one client's HTTP latency;
- 4, 16 and 64 concurrent clients (threads, one keep-alive httpx client each, closed loop):
  p50/p99 latency (ms, measured by the client), throughput (answered requests/s), errors
  (any status but 200, or no answer).

The primary setting runs every level, then the memory run: the server's RSS (VmRSS) before
and after ``--requests`` more ``/v1/decide`` requests from 64 clients (and after each tenth of
them, to tell a leak from allocator warm-up). The workers setting runs 1 and 16 clients (its
RSS is the sum over the supervisor and the workers). Beside each setting, the bare
batch-embedding throughput of the same queries in the same run: just before and just after
the 16-client level (their mean, so both see the machine as loaded), a fresh process embeds
that level's queries with the setting's total thread count (threads x workers), in batches
of 16 as they came (the ceiling the service's 16-client throughput is compared with) and
sorted by length over the whole level (an offline ceiling, printed beside it).

Options (each also an environment variable): ``--requests`` / BENCH_SERVE_REQUESTS (memory
run, default 100000; 0 skips it), ``--per-level`` / BENCH_SERVE_PER_LEVEL (requests per
concurrency level, default 1000), ``--threads`` / BENCH_SERVE_THREADS (the primary
setting's embedding threads; default 1). Raw numbers go to bench_out/serve.json; the tables to
the ``serve`` section of docs/benchmarks.md (and stdout).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks import datasets
from benchmarks.doc import machine_description, markdown_table, write_section
from tests.support.ports import free_port

if TYPE_CHECKING:
    from ragbound.gate import Gate

OUT = datasets.REPO / "bench_out"
KB_DIR = OUT / "kb-serve"
WORK = OUT / "serve"
SRC = datasets.REPO / "src"
TITLE = "HTTP service: latency, throughput and memory (`make bench-serve`)"
LEVELS = (1, 4, 16, 64)
COMPARE_LEVELS = (1, 16)  # the levels the other thread setting runs
MEMORY_CLIENTS = 64
MEMORY_SEGMENTS = 10  # RSS is read after each tenth of the memory run
CALIBRATION_K = 32
SEED = 0
PER_SET = 250  # TruthfulQA and HarmfulQA queries in the mix, beside 500 PubMedQA
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
TIMEOUT_S = 60.0
RECIPE_VERSION = 1  # bump when the knowledge base's recipe changes: bench_out is rebuilt


@dataclass(frozen=True)
class Target:
    """One target of issue 15: ``measure`` compared with ``bound`` by ``op``."""

    label: str
    measure: str
    op: str  # "<=" or ">=" or "<"; "info": printed, not judged
    bound: float


TARGETS = (
    Target("one client: HTTP p50 / in-process decide p50", "http1_over_decide_p50", "<=", 1.15),
    Target("16 clients: throughput / one client's", "throughput16_over_1", ">=", 3.0),
    Target(
        "16 clients: throughput / bare embedding, batches of 16 as they came",
        "throughput16_over_embed",
        ">=",
        0.85,
    ),
    Target(
        "16 clients: throughput / bare embedding sorted by length (an offline ceiling)",
        "throughput16_over_sorted",
        "info",
        0.0,
    ),
    Target("16 clients: p99, ms", "p99_16_ms", "<=", 250.0),
    Target("16 clients: errors", "errors_16", "<=", 0.0),
    Target("RSS growth over the memory run, %", "rss_growth_pct", "<", 5.0),
    Target("gateway overhead on answer / decide p50", "gateway_over_decide_p50", "<=", 1.2),
)


# ----------------------------------------------------------------- pure arithmetic
def level_summary(latencies_ms: Sequence[float], seconds: float, errors: int) -> dict:
    """p50/p99 latency (ms) of the answered requests, throughput (answered per second of
    ``seconds`` wall time) and the error count."""
    answered = len(latencies_ms)
    return {
        "requests": answered + errors,
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "throughput_per_s": answered / seconds if seconds > 0 else None,
        "errors": errors,
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (numpy's linear interpolation); None for no values."""
    return float(np.percentile(values, q)) if len(values) else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def growth_pct(before: float, after: float) -> float:
    """Growth from ``before`` to ``after`` in percent of ``before`` (negative: it shrank)."""
    return 100.0 * (after - before) / before


def measures(setting: dict) -> dict[str, float | None]:
    """The targets' measures of one thread setting's results (None: not measured)."""
    levels = setting["levels"]
    one, sixteen = levels.get("1", {}), levels.get("16", {})
    memory = setting.get("memory") or {}
    gateway = setting.get("gateway") or {}
    decide_p50 = setting["decide"]["p50_ms"]
    return {
        "http1_over_decide_p50": ratio(one.get("p50_ms"), decide_p50),
        "throughput16_over_1": ratio(sixteen.get("throughput_per_s"), one.get("throughput_per_s")),
        "throughput16_over_embed": ratio(
            sixteen.get("throughput_per_s"), setting.get("embed_per_s")
        ),
        "throughput16_over_sorted": ratio(
            sixteen.get("throughput_per_s"), setting.get("embed_sorted_per_s")
        ),
        "p99_16_ms": sixteen.get("p99_ms"),
        "errors_16": sixteen.get("errors"),
        "rss_growth_pct": memory.get("growth_pct"),
        "gateway_over_decide_p50": ratio(gateway.get("overhead_p50_ms"), decide_p50),
    }


def verdict(value: float | None, target: Target) -> str:
    """``pass`` or ``fail`` of ``value`` against ``target``; empty when not measured."""
    if value is None or target.op == "info":
        return ""
    passed = {
        "<=": value <= target.bound,
        ">=": value >= target.bound,
        "<": value < target.bound,
    }[target.op]
    return "pass" if passed else "fail"


# ----------------------------------------------------------------- tables
def serve_markdown(part: dict) -> list[str]:
    """The part's tables as Markdown lines: latency per level, then the targets."""
    settings = part["settings"]
    mix = ", ".join(f"{name} {n}" for name, n in part["query_mix"].items())
    actions = ", ".join(f"{a} {share:.0%}" for a, share in part["actions"].items())
    lines = [
        f"`ragbound serve` on loopback (child process, `--log` fsync-ed per batch) against "
        f"in-process `Gate.decide` in the same run. Knowledge base: {part['kb']}. Queries, "
        f"cycled: {mix} (decisions: {actions}). Clients are threads with one keep-alive httpx "
        "client each; latency is measured by the client; with one client each query is "
        "decided in-process and over HTTP alternately. Throughput: answered requests/s.",
        "",
        *markdown_table(
            ["setting", "clients", "requests", "p50 ms", "p99 ms", "req/s", "errors"],
            latency_rows(settings),
        ),
        "",
        *markdown_table(target_header(settings), target_rows(settings)),
        "",
        "Median of the per-query ratios HTTP / in-process decide (one client, same query, "
        "back to back; steadier than the ratio of the p50s on a busy machine): "
        + "; ".join(
            f"{s['label']}: {_ratio(s['levels']['1'].get('paired_ratio_p50'))}" for s in settings
        )
        + ". Bare embedding of the same queries in the same run, queries/s (in batches of 16 "
        "as they came, each one call as the service embeds a batch; and sorted by length over "
        "the whole level first, which no server can do with queries yet to arrive): "
        + "; ".join(
            f"{s['label']}: {_rate(s.get('embed_per_s'))} and {_rate(s.get('embed_sorted_per_s'))}"
            for s in settings
        )
        + ".",
    ]
    lines += one_client_floor(settings[0]) + cores_used(settings)
    memory = next((s["memory"] for s in settings if s.get("memory")), None)
    if memory:
        lines += [
            "",
            f"Memory run: {memory['requests']:,} `/v1/decide` requests from {memory['clients']} "
            f"clients in {memory['seconds']:.0f} s ({memory['errors']} errors); server RSS "
            f"{memory['rss_before_mb']:.0f} MB after warm-up and the levels, "
            f"{memory['rss_after_mb']:.0f} MB after (after each tenth: "
            f"{', '.join(f'{mb:.0f}' for mb in memory['rss_mb'][1:])} MB; growth over the "
            f"second half {memory['second_half_growth_pct']:.1f}%).",
        ]
    gateway = next((s["gateway"] for s in settings if s.get("gateway")), None)
    if gateway:
        lines += [
            "",
            f"Gateway: {gateway['requests']:,} chat completions the gate answers, one client, "
            "alternately through `serve --upstream` and straight to an upstream that replies at "
            f"once: p50 {_ms(gateway['gateway_p50_ms'])} ms through the gateway "
            f"(p99 {_ms(gateway['gateway_p99_ms'])}), {_ms(gateway['upstream_p50_ms'])} ms "
            f"direct, so {_ms(gateway['overhead_p50_ms'])} ms of overhead "
            f"({gateway['errors']} errors).",
        ]
    return lines


def one_client_floor(setting: dict) -> list[str]:
    """What one client's HTTP p50 cannot go below, measured in the same run: decide, plus a
    round trip that decides nothing (``GET /healthz``), plus an append and fsync of the log."""
    decide = setting.get("decide", {}).get("p50_ms")
    empty = setting["levels"].get("1", {}).get("healthz_p50_ms")
    fsync = setting.get("fsync_p50_ms")
    if decide is None or empty is None or fsync is None:
        return []
    floor = decide + empty + fsync
    return [
        "",
        f"One client, {setting['label']}, where the time over decide goes: a round trip that "
        f"decides nothing (`GET /healthz`, same client) p50 {empty:.2f} ms; an append and "
        f"`fsync` of a 400-byte line on the log's disk p50 {fsync:.2f} ms. With decide's "
        f"{_ms(decide)} ms that is {_ms(floor)} ms, {floor / decide:.2f} x decide, before the "
        "request's own parsing, the hand-offs between threads and the answer's JSON.",
    ]


def cores_used(settings: list[dict]) -> list[str]:
    """How the machine's cores were shared at 16 clients: the service's processes and the
    clients (this process's threads), in cores (CPU seconds per second)."""
    shares = [
        f"{s['label']}: the service {level['server_cores']:.2f}, the clients "
        f"{level['client_cores']:.2f}"
        for s in settings
        if "server_cores" in (level := s["levels"].get("16", {}))
    ]
    if not shares:
        return []
    return [
        "",
        f"Cores used at 16 clients (the clients run on the same {os.cpu_count()} cores as the "
        "service; the bare embedding had them to itself): " + "; ".join(shares) + ".",
    ]


def latency_rows(settings: list[dict]) -> list[list[str]]:
    rows = []
    for setting in settings:
        rows.append(_latency_row(setting["label"], "in-process decide", setting["decide"]))
        for clients, level in setting["levels"].items():
            rows.append(_latency_row(setting["label"], clients, level))
    return rows


def _latency_row(label: str, clients: str, summary: dict) -> list[str]:
    rate = summary["throughput_per_s"] if clients != "in-process decide" else None
    errors = "" if clients == "in-process decide" else str(summary["errors"])
    p50, p99 = _ms(summary["p50_ms"]), _ms(summary["p99_ms"])
    return [label, clients, str(summary["requests"]), p50, p99, _rate(rate), errors]


def target_header(settings: list[dict]) -> list[str]:
    header = ["target", "bound"]
    for setting in settings:
        header += [setting["label"], "verdict"]
    return header


def target_rows(settings: list[dict]) -> list[list[str]]:
    values = [measures(s) for s in settings]
    rows = []
    for target in TARGETS:
        if all(v[target.measure] is None for v in values):
            continue  # e.g. the gateway row before the gateway is benchmarked
        bound = "none" if target.op == "info" else f"{target.op} {target.bound:g}"
        row = [target.label, bound]
        for value in values:
            measured = value[target.measure]
            row += ["" if measured is None else f"{measured:.3g}", verdict(measured, target)]
        rows.append(row)
    return rows


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


# ----------------------------------------------------------------- options
@dataclass(frozen=True)
class Options:
    requests: int
    per_level: int
    threads: int  # the primary setting's embedding threads


def parse_options(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run serve", description=__doc__.split("\n\n")[0]
    )
    env = os.environ.get
    parser.add_argument(
        "--requests",
        type=int,
        default=int(env("BENCH_SERVE_REQUESTS", "100000")),
        help="requests in the memory run (0 skips it)",
    )
    parser.add_argument(
        "--per-level",
        type=int,
        default=int(env("BENCH_SERVE_PER_LEVEL", "1000")),
        help="requests per concurrency level",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=int(env("BENCH_SERVE_THREADS", "1")),
        help="embedding threads of the primary setting",
    )
    args = parser.parse_args(list(argv))
    if args.requests < 0 or args.per_level < 1 or args.threads < 1:
        parser.error("--requests must be >= 0, --per-level and --threads >= 1")
    return Options(args.requests, args.per_level, args.threads)


@dataclass(frozen=True)
class ServeSetting:
    """The service's processes (``--workers``) and each one's embedding threads."""

    threads: int
    workers: int = 1

    @property
    def label(self) -> str:
        each = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        return each if self.workers == 1 else f"{self.workers} workers x {each}"


def serve_settings(threads: int) -> list[ServeSetting]:
    """The primary setting (one process, ``threads``), then two workers of one thread."""
    return [ServeSetting(threads), ServeSetting(1, workers=2)]


def bare_embedding_rates(queries: Sequence[str], threads: int) -> dict[str, float]:
    """Queries/s of embedding ``queries`` in a fresh process with ``threads`` ONNX Runtime
    threads (the service's embedder, nothing else), two ways: ``batches``, in batches of 16
    in the order given, each one call as the service embeds a batch of 16 requests; ``sorted``,
    the whole list sorted by length first (an offline job's advantage: a server cannot sort
    queries that have not arrived)."""
    code = (
        "import json, sys, time\n"
        "from ragbound.embedders import load_dense_embedder, set_cpu_threads\n"
        f"set_cpu_threads({threads})\n"
        "queries = json.load(sys.stdin)\n"
        "embedder = load_dense_embedder('minilm')\n"
        "embedder.encode(queries[:32], batch_size=16)\n"
        "began = time.perf_counter()\n"
        "for first in range(0, len(queries), 16):\n"
        "    embedder.encode(queries[first : first + 16], batch_size=16)\n"
        "batches = len(queries) / (time.perf_counter() - began)\n"
        "began = time.perf_counter()\n"
        "embedder.encode(queries, batch_size=16)\n"
        "ordered = len(queries) / (time.perf_counter() - began)\n"
        "print(json.dumps({'batches': batches, 'sorted': ordered}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(list(queries)),
        env=server_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------- data
def query_mix() -> dict[str, list[str]]:
    """Held-out questions: none is a calibration query or a tripwire."""
    _, ik_test = _calibration_split()
    rng = random.Random(SEED)
    truthful = datasets.truthfulqa_questions()
    harmful = _tripwire_splits()["test_in_topic"]
    return {
        "PubMedQA held-out": ik_test,
        "TruthfulQA": rng.sample(truthful, min(PER_SET, len(truthful))),
        "HarmfulQA in-topic test": rng.sample(harmful, min(PER_SET, len(harmful))),
    }


def interleave(sets: dict[str, list[str]], seed: int = SEED) -> list[str]:
    """Every query of every set, in a seeded random order."""
    pool = [q for queries in sets.values() for q in queries]
    random.Random(seed).shuffle(pool)
    return pool


def _tripwire_splits() -> dict:
    from benchmarks.tripwires import splits

    return splits(SEED)


def served_gate(folder: Path = KB_DIR) -> Gate:
    """The calibrated, tripwired PubMedQA knowledge base in ``folder`` (built when absent or
    built by another recipe), opened as a Gate."""
    from benchmarks.tripwires import guarded_kb
    from ragbound.detect import Guard
    from ragbound.errors import ArtifactError, InputError
    from ragbound.gate import Gate
    from ragbound.knowledge import KnowledgeBase

    tripwires = _tripwire_splits()["tripwires"]
    recipe = {"version": RECIPE_VERSION, "k": CALIBRATION_K, "tripwires": len(tripwires)}
    stamp = folder.with_name(folder.name + ".recipe.json")
    if stamp.is_file() and json.loads(stamp.read_text()) == recipe:
        try:
            gate = Gate.load(folder)
            if gate.tripwires is not None:
                return gate
        except (ArtifactError, InputError, OSError):
            pass
    print(f"building the benchmark's knowledge base in {folder} (minutes)...", flush=True)
    calibration, _ = _calibration_split()
    corpus = datasets.write_pubmedqa_corpus(OUT / "pubmedqa_corpus.jsonl")
    kb = guarded_kb(
        KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS),
        tripwires,
        folder,
    )
    Guard.calibrate(kb, calibration, k=CALIBRATION_K).save()
    stamp.write_text(json.dumps(recipe))
    return Gate.load(folder)


def _calibration_split() -> tuple[list[str], list[str]]:
    from ragbound.detect.evaluate import split_queries

    return split_queries(datasets.pubmedqa_questions(), 0.5, seed=SEED)


# ----------------------------------------------------------------- the server
class ServerChild:
    """``ragbound serve KB --log LOG --threads N [--workers W]`` in a child process on
    loopback."""

    def __init__(self, kb_dir: Path, setting: ServeSetting, work: Path, extra: Sequence[str] = ()):
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / f"log-threads{setting.threads}-workers{setting.workers}.jsonl"
        for stale in (self.log, self.log.with_name(self.log.name + ".monitor.json")):
            stale.unlink(missing_ok=True)  # a fresh log and monitor for each server
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "ragbound.cli", "serve", str(kb_dir)]
        command += ["--port", str(self.port), "--log", str(self.log), *extra]
        command += ["--threads", str(setting.threads), "--workers", str(setting.workers)]
        self.stderr_path = work / f"server-threads{setting.threads}-{setting.workers}.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            command,
            env=server_env(),
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            # a background shell starts jobs with SIGINT ignored; __exit__ relies on it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def __enter__(self) -> ServerChild:
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._stderr.close()

    def _wait_ready(self, timeout: float = 300.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"ragbound serve exited with {self.process.returncode}: "
                    f"{self.stderr_path.read_text(errors='replace')[-2000:]}"
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.url} not ready after {timeout:.0f} s")

    def pids(self) -> list[int]:
        """The service's processes: the one given, or the supervisor and its workers."""
        pids = [self.process.pid]
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            pids += [int(pid) for pid in (task / "children").read_text().split()]
        return pids

    def rss_mb(self) -> float:
        """The service's resident set size (VmRSS), MB: with workers, the sum over the
        supervisor and its children."""
        return sum(_rss_mb(pid) for pid in self.pids())

    def cpu_seconds(self) -> float:
        """CPU time (user + system, s) the service's processes have used so far."""
        return sum(_cpu_seconds(pid) for pid in self.pids())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def server_env() -> dict[str, str]:
    """The child's environment: this checkout's src first, and no OMP/MKL thread variables
    (``--threads`` sets the count)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


# ----------------------------------------------------------------- load
def run_clients(url: str, queries: Sequence[str], clients: int, requests: int) -> dict:
    """``requests`` POST /v1/decide from ``clients`` closed-loop clients (threads, one
    keep-alive connection each, opened before the clock starts); a level summary, with the
    latencies (ms) and the error kinds."""
    import httpx

    counter = itertools.count()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[Counter[str]] = [Counter() for _ in range(clients)]
    start = threading.Barrier(clients + 1)

    def client_loop(i: int) -> None:
        with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
            try:
                client.get("/healthz")  # open the keep-alive connection
            finally:
                start.wait()
            while (n := next(counter)) < requests:
                query = queries[n % len(queries)]
                began = time.perf_counter()
                try:
                    response = client.post("/v1/decide", json={"query": query})
                except httpx.HTTPError as exc:
                    errors[i][type(exc).__name__] += 1
                    continue
                elapsed_ms = (time.perf_counter() - began) * 1e3
                if response.status_code == 200:
                    latencies[i].append(elapsed_ms)
                else:
                    errors[i][str(response.status_code)] += 1

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    merged = [ms for per_client in latencies for ms in per_client]
    kinds = sum(errors, Counter())
    summary = level_summary(merged, seconds, sum(kinds.values()))
    return summary | {"clients": clients, "seconds": seconds, "error_kinds": dict(kinds)}


def paired_single(gate: Gate, url: str, queries: Sequence[str], requests: int) -> tuple[dict, dict]:
    """One client: each query decided in-process, then over HTTP. The (decide, HTTP)
    summaries; each one's throughput is per second spent on it."""
    import httpx

    decide_ms: list[float] = []
    http_ms: list[float] = []
    empty_ms: list[float] = []  # a round trip that decides nothing: the floor of HTTP's cost
    errors: Counter[str] = Counter()
    with httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
        client.get("/healthz")
        for n in range(requests):
            query = queries[n % len(queries)]
            began = time.perf_counter()
            client.get("/healthz").raise_for_status()
            empty_ms.append((time.perf_counter() - began) * 1e3)
            began = time.perf_counter()
            gate.decide(query)
            decide_ms.append((time.perf_counter() - began) * 1e3)
            began = time.perf_counter()
            try:
                response = client.post("/v1/decide", json={"query": query})
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
                continue
            if response.status_code == 200:
                http_ms.append((time.perf_counter() - began) * 1e3)
            else:
                errors[str(response.status_code)] += 1
    decide = level_summary(decide_ms, sum(decide_ms) / 1e3, 0)
    http = level_summary(http_ms, sum(http_ms) / 1e3, sum(errors.values()))
    paired = [h / d for h, d in zip(http_ms, decide_ms, strict=False)] if not errors else []
    http |= {
        "clients": 1,
        "error_kinds": dict(errors),
        "paired_ratio_p50": percentile(paired, 50),
        "healthz_p50_ms": percentile(empty_ms, 50),
    }
    return decide, http


def fsync_p50_ms(folder: Path, appends: int = 300) -> float | None:
    """p50 of one append of a decision-sized line (400 bytes) and its ``fsync``, in a file
    in ``folder`` (the log's disk): the durable log's cost before each answer."""
    path = folder / "fsync-probe.jsonl"
    line = b"{" + b"x" * 398 + b"\n"
    times = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    try:
        for _ in range(appends):
            began = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            times.append((time.perf_counter() - began) * 1e3)
    finally:
        os.close(fd)
        path.unlink()
    return percentile(times, 50)


def measure_gateway(
    gate: Gate, kb_dir: Path, setting: ServeSetting, pool: list[str], requests: int
) -> dict:
    """Gateway overhead on ``answer`` (issue 15 target: <= 1.2 x in-process decide p50).

    An instant upstream (``tests.support.instant_upstream``, a fixed reply) runs in a child
    process; the service runs with ``--upstream`` pointing at it. One client sends chat
    completions whose last user message the gate answers, alternately through the gateway and
    straight to the upstream; the overhead is the difference of the two p50s (ms).
    """
    queries = answer_queries(gate, pool)[: max(1, requests)]
    with InstantUpstream() as upstream:
        extra = ["--upstream", upstream.base_url]
        with ServerChild(kb_dir, setting, WORK / "gateway", extra=extra) as server:
            gateway_ms, direct_ms, errors = _paired_chats(
                server.url + "/v1", upstream.base_url, queries, requests
            )
    gateway = percentile(gateway_ms, 50)
    direct = percentile(direct_ms, 50)
    return {
        "requests": requests,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "gateway_p50_ms": gateway,
        "gateway_p99_ms": percentile(gateway_ms, 99),
        "upstream_p50_ms": direct,
        "overhead_p50_ms": None if gateway is None or direct is None else gateway - direct,
    }


def _paired_chats(
    gateway_url: str, upstream_url: str, queries: Sequence[str], requests: int
) -> tuple[list[float], list[float], Counter[str]]:
    import httpx

    gateway_ms: list[float] = []
    direct_ms: list[float] = []
    errors: Counter[str] = Counter()
    with httpx.Client(timeout=TIMEOUT_S) as client:
        client.get(upstream_url.removesuffix("/v1") + "/docs")  # open the connections
        for n in range(requests):
            body = {
                "model": "bench",
                "messages": [{"role": "user", "content": queries[n % len(queries)]}],
            }
            for url, times in ((gateway_url, gateway_ms), (upstream_url, direct_ms)):
                began = time.perf_counter()
                try:
                    response = client.post(f"{url}/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                if response.status_code == 200:
                    times.append((time.perf_counter() - began) * 1e3)
                else:
                    errors[str(response.status_code)] += 1
    return gateway_ms, direct_ms, errors


class InstantUpstream:
    """``tests.support.instant_upstream:app`` (a fixed reply, at once) under uvicorn in a child
    process on loopback; ``base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}/v1"
        command = [sys.executable, "-m", "uvicorn", "tests.support.instant_upstream:app"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        self.process = subprocess.Popen(
            command,
            cwd=datasets.REPO,
            env=server_env(),
            stdout=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def __enter__(self) -> InstantUpstream:
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the instant upstream exited with {self.process.returncode}")
            try:
                httpx.get(self.base_url.removesuffix("/v1") + "/docs", timeout=2)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        self.__exit__()
        raise TimeoutError("the instant upstream did not start in 60 s")

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)


def answer_queries(gate: Gate, queries: Sequence[str]) -> list[str]:
    """The queries the gate decides ``answer`` (what the gateway forwards upstream)."""
    return [d.query for d in gate.decide_many(list(queries)) if d.action == "answer"]


def decision_shares(gate: Gate, queries: Sequence[str]) -> dict[str, float]:
    """Share of each action over ``queries`` (decided in-process, in batches)."""
    counts: Counter[str] = Counter()
    for start in range(0, len(queries), 64):
        counts.update(d.action for d in gate.decide_many(list(queries[start : start + 64])))
    return {action: counts[action] / len(queries) for action in ("answer", "abstain", "reject")}


# ----------------------------------------------------------------- the run
def measure_setting(
    gate: Gate,
    kb_dir: Path,
    setting: ServeSetting,
    pool: list[str],
    options: Options,
    primary: bool,
) -> dict:
    """One setting: its server, the levels, the bare embedding rate, and (primary) the
    memory run."""
    levels = LEVELS if primary else COMPARE_LEVELS
    print(f"{setting.label}: starting ragbound serve...", flush=True)
    result: dict = {
        "label": setting.label,
        "threads": setting.threads,
        "workers": setting.workers,
        "levels": {},
    }
    embed_threads = setting.threads * setting.workers
    with ServerChild(kb_dir, setting, WORK) as server:
        run_clients(server.url, pool, MEMORY_CLIENTS, 4 * MEMORY_CLIENTS)  # warm-up
        for query in pool[:20]:
            gate.decide(query)
        for clients in levels:
            offset = (clients * 97) % len(pool)  # each level starts elsewhere in the pool
            queries = pool[offset:] + pool[:offset]
            if clients == 1:
                result["decide"], level = paired_single(
                    gate, server.url, queries, options.per_level
                )
                result["fsync_p50_ms"] = fsync_p50_ms(server.log.parent)
            elif clients == 16:  # the bare embedding just before and after, as loaded
                before = bare_embedding_rates(queries[: options.per_level], embed_threads)
                server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
                level = run_clients(server.url, queries, clients, options.per_level)
                # on one machine the clients' CPU is taken from the cores the server has
                level["server_cores"] = (server.cpu_seconds() - server_cpu) / level["seconds"]
                level["client_cores"] = (time.process_time() - client_cpu) / level["seconds"]
                after = bare_embedding_rates(queries[: options.per_level], embed_threads)
                result["embed_per_s"] = (before["batches"] + after["batches"]) / 2
                result["embed_sorted_per_s"] = (before["sorted"] + after["sorted"]) / 2
            else:
                level = run_clients(server.url, queries, clients, options.per_level)
            result["levels"][str(clients)] = level
            print(f"  {clients} clients: {_brief(level)}", flush=True)
        if primary and options.requests:
            result["memory"] = memory_run(server, pool, options.requests)
    if primary:
        result["gateway"] = measure_gateway(gate, kb_dir, setting, pool, options.per_level)
    return result


def memory_run(server: ServerChild, pool: list[str], requests: int) -> dict:
    """Server RSS before ``requests`` /v1/decide requests from 64 clients and after each
    tenth of them (a leak keeps growing; allocator warm-up levels off)."""
    print(f"  memory run: {requests:,} requests from {MEMORY_CLIENTS} clients...", flush=True)
    rss = [server.rss_mb()]
    loads = []
    for segment in split_count(requests, MEMORY_SEGMENTS):
        offset = (len(loads) * 211) % len(pool)
        loads.append(
            run_clients(server.url, pool[offset:] + pool[:offset], MEMORY_CLIENTS, segment)
        )
        rss.append(server.rss_mb())
    seconds = sum(load["seconds"] for load in loads)
    answered = sum(load["requests"] - load["errors"] for load in loads)
    return {
        "requests": sum(load["requests"] for load in loads),
        "clients": MEMORY_CLIENTS,
        "seconds": seconds,
        "errors": sum(load["errors"] for load in loads),
        "throughput_per_s": answered / seconds if seconds > 0 else None,
        "rss_mb": rss,
        "rss_before_mb": rss[0],
        "rss_after_mb": rss[-1],
        "growth_pct": growth_pct(rss[0], rss[-1]),
        "second_half_growth_pct": growth_pct(rss[len(rss) // 2], rss[-1]),
    }


def split_count(total: int, parts: int) -> list[int]:
    """``total`` split into at most ``parts`` near-equal positive counts, in order."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _brief(level: dict) -> str:
    return (
        f"p50 {_ms(level['p50_ms'])} ms, p99 {_ms(level['p99_ms'])} ms, "
        f"{_rate(level['throughput_per_s'])} req/s, {level['errors']} errors"
    )


def serve_part(argv: Sequence[str] = ()) -> dict:
    """Run the benchmark; its results (also written to bench_out/serve.json)."""
    options = parse_options(argv)
    began = time.monotonic()
    reason = datasets.tripwire_missing_reason()
    if reason:
        raise SystemExit(f"the serve benchmark needs the tripwire sets: {reason}")
    from ragbound.embedders import set_cpu_threads

    set_cpu_threads(options.threads)  # the in-process gate's embedder, as the primary server's
    gate = served_gate()
    sets = query_mix()
    pool = interleave(sets)
    part: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_description(),
        "options": asdict(options),
        "kb": (
            f"PubMedQA corpus, {len(gate.guard.kb):,} chunks, minilm, calibrated on "
            f"{len(_calibration_split()[0])} PubMedQA questions (k = {CALIBRATION_K}), "
            f"{len(gate.tripwires.tripwires):,} HarmfulQA tripwires, rule "
            f"{gate.tripwires.rule.describe()}"
        ),
        "query_mix": {name: len(queries) for name, queries in sets.items()},
        "actions": decision_shares(gate, pool),
        "settings": [],
    }
    for i, setting in enumerate(serve_settings(options.threads)):
        part["settings"].append(measure_setting(gate, KB_DIR, setting, pool, options, i == 0))
    part["elapsed_s"] = time.monotonic() - began
    OUT.mkdir(exist_ok=True)
    (OUT / "serve.json").write_text(json.dumps(part, indent=2))
    return part


def main(argv: Sequence[str] = ()) -> None:
    part = serve_part(argv)
    lines = serve_markdown(part)
    print("\n".join(lines))
    written = write_section("serve", TITLE, "\n".join(lines))
    print(f"raw numbers: {OUT / 'serve.json'}; tables written to {written}")
    print(f"the benchmark took {part['elapsed_s'] / 60:.1f} min")
