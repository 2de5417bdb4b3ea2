"""Vectors at scale: memory-mapped loading, float16 storage and the staged (resumable) build."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import pytest

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import STAGING, KnowledgeBase, staging_dir

QUERIES = ["Which dance do bees use to show where food is?", "How wide is a railway gauge?"]


def is_memory_mapped(array: np.ndarray) -> bool:
    """True when the array's memory is a file mapping, not a copy in this process."""
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return isinstance(base, mmap.mmap)


def vector_file(kb_dir: Path) -> Path:
    [segment] = json.loads((kb_dir / "manifest.json").read_text())["segments"]
    return kb_dir / "segments" / f"{segment['name']}.vectors.npy"


def test_loaded_vectors_are_memory_mapped_and_search_as_in_memory(
    corpus_dir: Path, minilm_kb_dir: Path
):
    built = KnowledgeBase.build([corpus_dir], embedder="minilm")
    loaded = KnowledgeBase.load(minilm_kb_dir)
    assert is_memory_mapped(loaded.vectors) and not is_memory_mapped(built.vectors)
    assert not loaded.vectors.flags["WRITEABLE"]
    expected, found = built.search(QUERIES, k=5), loaded.search(QUERIES, k=5)
    np.testing.assert_array_equal(found.indices, expected.indices)
    np.testing.assert_allclose(found.similarities, expected.similarities, atol=1e-6)


def test_each_segment_stays_mapped_after_an_add(minilm_kb_dir: Path, tmp_path: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    kb.save(tmp_path / "kb")
    more = tmp_path / "more"
    more.mkdir()
    (more / "owls.txt").write_text("Owls hunt mice at night and turn their heads far around.")
    kb = KnowledgeBase.load(tmp_path / "kb")
    kb.add([more])
    kb.save()
    grown = KnowledgeBase.load(tmp_path / "kb")
    assert len(grown.manifest.segments) == 2
    maps = Path("/proc/self/maps").read_text()
    files = list((tmp_path / "kb" / "segments").glob("*.vectors.npy"))
    assert len(files) == 2 and all(str(path.resolve()) in maps for path in files)
    everything = grown.vectors  # one matrix, concatenated in memory
    full = grown.embed(QUERIES) @ everything.T
    hits = grown.search(QUERIES, k=4)
    np.testing.assert_array_equal(hits.indices, np.argsort(-full, axis=1, kind="stable")[:, :4])
    assert grown.chunk_at(
        grown.search(["owls hunting at night"], k=1).indices[0, 0]
    ).source.endswith("owls.txt")


def test_a_vector_file_with_nan_is_refused_on_load(minilm_kb_dir: Path, tmp_path: Path):
    KnowledgeBase.load(minilm_kb_dir).save(tmp_path / "kb")
    path = vector_file(tmp_path / "kb")
    vectors = np.load(path)
    vectors[3, 7] = np.nan
    np.save(path, vectors)
    manifest_path = tmp_path / "kb" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["segments"][0]["vectors_sha256"] = None  # only the finite check can catch it now
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="NaN or infinite"):
        KnowledgeBase.load(tmp_path / "kb")


def test_float16_storage_round_trips_and_is_recorded(corpus_dir: Path, tmp_path: Path):
    wide = KnowledgeBase.build([corpus_dir], embedder="minilm")
    narrow = KnowledgeBase.build([corpus_dir], embedder="minilm", vector_dtype="float16")
    assert narrow.vectors.dtype == np.float16
    np.testing.assert_array_equal(narrow.vectors, wide.vectors.astype(np.float16))
    narrow.save(tmp_path / "kb")
    manifest = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    assert manifest["vector_dtype"] == "float16"
    loaded = KnowledgeBase.load(tmp_path / "kb")
    assert loaded.vectors.dtype == np.float16 and is_memory_mapped(loaded.vectors)
    np.testing.assert_array_equal(loaded.vectors, narrow.vectors)
    assert vector_file(tmp_path / "kb").stat().st_size < wide.vectors.nbytes / 2 + 1024
    assert loaded.describe().parameters == {"precision": "float32", "storage": "float16"}
    assert loaded.fingerprint == wide.fingerprint  # same knowledge; the search info differs
    near, exact = loaded.search(QUERIES, k=3), wide.search(QUERIES, k=3)
    assert near.similarities.dtype == np.float32
    np.testing.assert_allclose(near.similarities, exact.similarities, atol=2e-3)
    np.testing.assert_array_equal(near.indices[:, 0], exact.indices[:, 0])


def test_a_float32_manifest_with_a_float16_file_is_refused(corpus_dir: Path, tmp_path: Path):
    KnowledgeBase.build([corpus_dir], embedder="minilm", vector_dtype="float16").save(
        tmp_path / "kb"
    )
    manifest_path = tmp_path / "kb" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["vector_dtype"] = "float32"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"expected float32 .* found float16"):
        KnowledgeBase.load(tmp_path / "kb")


def test_an_unknown_vector_dtype_is_an_input_error(corpus_dir: Path):
    with pytest.raises(InputError, match="vector_dtype must be one of float32, float16"):
        KnowledgeBase.build([corpus_dir], embedder="minilm", vector_dtype="int8")  # type: ignore[arg-type]


def test_a_staged_build_equals_an_in_memory_build_and_its_staging_goes_on_save(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RAGBOUND_STAGE_BLOCK", "3")
    target = tmp_path / "kb"
    staged = KnowledgeBase.build([corpus_dir], embedder="minilm", staging=staging_dir(target))
    blocks = sorted(p.name for p in staging_dir(target).glob("*/block-*.npy"))
    assert blocks == [f"block-{n:06d}.npy" for n in range(1, 5)]  # 10 chunks in blocks of 3
    assert is_memory_mapped(staged.vectors)
    in_memory = KnowledgeBase.build([corpus_dir], embedder="minilm")
    np.testing.assert_allclose(staged.vectors, in_memory.vectors, atol=1e-6)
    staged.save(target)
    assert not (target / STAGING).exists()
    np.testing.assert_array_equal(KnowledgeBase.load(target).vectors, staged.vectors)


def test_a_bad_stage_block_setting_is_an_input_error(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RAGBOUND_STAGE_BLOCK", "zero")
    with pytest.raises(InputError, match=r"\$RAGBOUND_STAGE_BLOCK must be a positive integer"):
        KnowledgeBase.build([corpus_dir], embedder="minilm", staging=tmp_path / "stage")


def test_index_vector_dtype_float16_from_the_command_line(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    from tests.cli.runner import run

    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(tmp_path / "kb"),
        "--vector-dtype", "float16",
    )  # fmt: skip
    assert code == 0, err
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert kb.manifest.vector_dtype == "float16" and kb.vectors.dtype == np.float16
    assert not (tmp_path / "kb" / STAGING).exists()


def test_float16_chunks_with_float32_units_staged_search_like_float32(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Granularity and the million-chunk storage together: float16 chunk vectors built in
    staged blocks sit beside float32 unit vectors, and the pooled search agrees with an
    all-float32 build to float16's precision."""
    from ragbound.corpus.units import unit_params

    monkeypatch.setenv("RAGBOUND_STAGE_BLOCK", "2")
    units = unit_params("chunk,sentence", 3)
    plain = KnowledgeBase.build([corpus_dir], embedder="minilm", units=units)
    out = tmp_path / "kb"
    staged = KnowledgeBase.build(
        [corpus_dir],
        embedder="minilm",
        units=units,
        vector_dtype="float16",
        staging=staging_dir(out),
    )
    staged.save(out)
    loaded = KnowledgeBase.load(out)
    assert loaded.vectors.dtype == np.float16 and loaded.granularity == ("chunk", "sentence")
    assert not staging_dir(out).exists()
    rows, size = loaded.index_size()
    assert size == loaded.dimension * (len(loaded) * 2 + (rows - len(loaded)) * 4)
    expected, found = plain.search(QUERIES, k=3), loaded.search(QUERIES, k=3)
    np.testing.assert_array_equal(found.indices, expected.indices)
    np.testing.assert_allclose(found.similarities, expected.similarities, atol=2e-3)
