"""The parts of a service with workers, by hand: metrics added up across processes, the
dashboard's data merged, and one log appended to by several writers."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ragbound.serve.dashboard import DashboardState, merged_stats
from ragbound.serve.fit import fit_shown, merged_fit
from ragbound.serve.metrics import Registry, merged
from ragbound.serve.querylog import QueryLog, read_scores
from ragbound.serve.shared import publish, published
from tests.serve.test_parts import _decision


def _worker(hits: float, ready: float, move: float, share: float) -> dict:
    registry = Registry()
    registry.counter("hits_total", "Hits.")
    registry.histogram("size", "Sizes.", [1, 5])
    registry.gauge("ready", "Ready.", "min")
    registry.gauge("move", "Move.", "max")
    registry.gauge("share", "Share.")
    registry.inc("hits_total", hits, topic="harm")
    registry.observe("size", hits)
    registry.set("ready", ready)
    registry.set("move", move)
    registry.set("share", share)
    return registry.snapshot()


def test_counters_and_histograms_add_up_and_gauges_merge_by_their_mode() -> None:
    text = merged({"0": _worker(2, 1, math.nan, 0.1), "1": _worker(3, 0, 0.25, 0.2)}).render()
    assert text == (
        "# HELP hits_total Hits.\n# TYPE hits_total counter\n"
        'hits_total{topic="harm"} 5\n'
        "# HELP size Sizes.\n# TYPE size histogram\n"
        'size_bucket{le="1"} 0\nsize_bucket{le="5"} 2\nsize_bucket{le="+Inf"} 2\n'
        "size_sum 5\nsize_count 2\n"
        "# HELP ready Ready.\n# TYPE ready gauge\nready 0\n"
        "# HELP move Move.\n# TYPE move gauge\nmove 0.25\n"
        '# HELP share Share.\n# TYPE share gauge\nshare{worker="0"} 0.1\n'
        'share{worker="1"} 0.2\n'
    )


def test_a_gauge_no_process_knows_stays_nan_and_one_process_renders_as_itself() -> None:
    alone = _worker(1, 1, math.nan, 0.5)
    assert "move NaN" in merged({"0": alone, "1": alone}).render()
    registry = Registry()
    registry.counter("hits_total", "Hits.")
    registry.inc("hits_total", 4)
    assert merged({"0": registry.snapshot()}).render() == registry.render()


def test_publications_are_read_back_whole_and_by_name(tmp_path: Path) -> None:
    publish(tmp_path, "0", {"a": 1})
    publish(tmp_path, "0", {"a": 2})
    publish(tmp_path, "monitor", {"windows": []})
    (tmp_path / "broken.json").write_text("{")  # skipped, as a file mid-replacement would be
    assert published(tmp_path) == {"0": {"a": 2}, "monitor": {"windows": []}}


def test_the_workers_dashboards_add_up() -> None:
    first, second = DashboardState(), DashboardState()
    first.record([_decision("one"), _decision("two")])
    second.record([_decision("three")])
    parts = [state.snapshot(True, None, 50) for state in (first, second)]
    stats = merged_stats(parts, None)
    assert stats.counts == {"answer": 3, "abstain": 0, "reject": 0} and stats.total == 3
    assert stats.p_values.n == 3 and sum(stats.p_values.counts) == 3
    assert stats.started == min(p.started for p in parts)


def test_fit_windows_add_up_to_the_service_s() -> None:
    both = merged_fit([fit_shown(10, 100, 1, 0.05, 99), fit_shown(30, 100, 2, 0.05, 99)])
    assert both == fit_shown(40, 200, 3, 0.05, 99)
    assert both.share == 3 / 40


def test_shared_writers_append_whole_lines_and_cut_a_line_a_killed_one_tore(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    QueryLog(path).close()  # the supervisor's open: a log the service wrote
    one, two = QueryLog(path, shared=True), QueryLog(path, shared=True)
    one.append([_decision("a"), _decision("b")])
    with path.open("ab") as handle:
        handle.write(b'{"time": "2026-')  # a worker killed mid-write
    landed = two.append([_decision("c")])
    one.append([_decision("d")])
    one.close()
    two.close()
    assert landed[0].line == 0  # a shared writer does not know the line numbers
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["query"] for line in lines] == ["a", "b", "c", "d"]
    assert [item.line for item, _ in read_scores(path, (None, 0), 1)] == [1, 2, 3, 4]
