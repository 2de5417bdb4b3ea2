"""pgvector's HNSW: a calibration made with one ef_search (or with HNSW at all) is refused by a
knowledge base that now searches otherwise, unless forced; on a real server."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from tests.cli.runner import run
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


def _set_search(kb: Path, search: str, ef_search: int | None) -> None:
    """Point the manifest at another search of the same table (as a later attach would)."""
    manifest = json.loads((kb / "manifest.json").read_text())
    manifest["backing"]["location"].update(search=search, ef_search=ef_search)
    (kb / "manifest.json").write_text(json.dumps(manifest))


def test_pgvector_refuses_a_calibration_made_with_another_search(
    monkeypatch, capsys, pg_dsn, corpus_dir, tmp_path
):
    kb, table = tmp_path / "kb", f"valid_{secrets.token_hex(3)}"
    url = f"{pg_dsn}&table={table}&search=hnsw&ef_search=64"
    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(kb), "--backing", url
    )
    assert code == 0, err
    queries = tmp_path / "queries.txt"
    queries.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE) + "\n", encoding="utf-8")
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(queries), "--k", "2"
    )
    assert code == 0, err
    decide = ["decide", str(kb), OUT_OF_KNOWLEDGE[0], "--json"]
    code, _, err = run(monkeypatch, capsys, *decide)
    assert code == 0, err

    _set_search(kb, "hnsw", 20)
    code, _, err = run(monkeypatch, capsys, *decide)
    assert code == 2 and "pgvector" in err and "ef_search=64" in err and "ef_search=20" in err
    assert "--force" in err
    code, _, err = run(monkeypatch, capsys, *decide, "--force")
    assert code == 0, err

    _set_search(kb, "exact", None)
    code, _, err = run(monkeypatch, capsys, *decide)
    assert code == 2 and "now searches with pgvector (exact" in err
