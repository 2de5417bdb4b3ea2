"""``ragbound synth`` refuses bad options before calling an LLM."""

from pathlib import Path

from tests.cli.runner import run


def test_synth_refuses_bad_options_in_one_line(monkeypatch, capsys, minilm_kb_dir, tmp_path):
    out = str(tmp_path / "q.jsonl")
    code, _, err = run(
        monkeypatch, capsys, "synth", str(minilm_kb_dir), "--out", out, "--context", "page"
    )
    assert code == 2 and "--context" in err and "document, chunk" in err

    code, _, err = run(
        monkeypatch, capsys, "synth", str(minilm_kb_dir), "--out", out, "--examples", "nope.json"
    )
    assert code == 2 and "examples file not found: nope.json" in err

    missing_model = str(tmp_path / "absent.gguf")
    code, _, err = run(
        monkeypatch,
        capsys,
        "synth",
        str(minilm_kb_dir),
        "--out",
        out,
        "--llm",
        f"local:{missing_model}",
    )
    assert code == 2 and ("absent.gguf" in err or "llama-cpp-python" in err)
    assert "Traceback" not in err
    assert not Path(out).exists()  # nothing half-written
