"""``ragbound shift``: batch and log."""

import json

from tests.cli.runner import run, write_log
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


def test_shift_batch_and_log(monkeypatch, capsys, minilm_kb_dir, tmp_path):
    from ragbound.knowledge import KnowledgeBase
    from tests.texts import MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE

    kb = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb)
    calibration = tmp_path / "cal.txt"
    calibration.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]) + "\n")
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(calibration), "--k", "4"
    )
    assert code == 0, err

    batch = tmp_path / "batch.txt"
    batch.write_text("\n".join(OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE) + "\n")
    code, out, err = run(monkeypatch, capsys, "shift", str(kb), "--queries", str(batch), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["test"] == "ks" and report["shifted"] and report["n_test"] == 16

    log = write_log(tmp_path / "log.jsonl", MORE_IN_KNOWLEDGE[10:] + MORE_OUT_OF_KNOWLEDGE[:6])
    args = ["shift", str(kb), "--queries", str(log), "--window", "6", "--json"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    windows = [json.loads(line) for line in out.splitlines()]
    assert [w["n"] for w in windows] == [6, 6]
    assert {"start", "end", "n", "statistic", "p_value", "alarm"} <= set(windows[0])
    assert windows[1]["alarm"] and windows[1]["p_value"] < windows[0]["p_value"]
    assert "2 window(s) tested" in err

    code, out, err = run(monkeypatch, capsys, *args)  # nothing new since the last run
    assert code == 0 and out == "" and "no window completed" in err

    code, out, err = run(monkeypatch, capsys, *args, "--restart")
    assert len(out.splitlines()) == 2

    # the schemes whose level does not decay: arl tests every window at 1/arl
    code, out, err = run(
        monkeypatch, capsys, *args, "--restart", "--correction", "arl", "--arl", "50"
    )
    assert code == 0, err
    assert [json.loads(line)["alpha"] for line in out.splitlines()] == [0.02, 0.02]
    code, out, err = run(
        monkeypatch, capsys, *args, "--restart", "--correction", "period", "--period", "1d"
    )
    assert code == 0, err
    assert len(out.splitlines()) == 2

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"time": 1, "query": "How do bees dance?"}\n{"time": 2}\n')
    code, _, err = run(monkeypatch, capsys, "shift", str(kb), "--queries", str(bad))
    assert code == 2 and "bad.jsonl:2 (field 'query'): missing" in err
