"""``ragbound index`` and ``ragbound add``: build and grow a knowledge base."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import JsonOpt, console, emit_json, notice, progress

if TYPE_CHECKING:
    from ragbound.knowledge import KnowledgeBase


def index(
    corpus: Annotated[
        list[Path], typer.Argument(help="Files or folders (.txt .md .jsonl .json .csv .tsv).")
    ],
    out: Annotated[
        Path,
        typer.Option("--out", help="Knowledge-base directory to create.", callback=validate.folder),
    ],
    embedder: Annotated[
        str, typer.Option(help="minilm (default), mpnet, bm25, or a local model folder.")
    ] = "minilm",
    chunk_words: Annotated[
        int, typer.Option(help="Maximum words per chunk.", callback=validate.positive_int)
    ] = 200,
    overlap: Annotated[
        int,
        typer.Option(
            help="Most words of whole sentences a chunk repeats from the end of the one before.",
            callback=validate.non_negative_int,
        ),
    ] = 40,
    granularity: Annotated[
        str,
        typer.Option(
            help=(
                "Units that score chunks, comma-separated: chunk, sentence, window (e.g. "
                "chunk,sentence). Chunks are always kept as the evidence; sentence and window "
                "units are indexed too, and a chunk scores as its best unit."
            ),
            callback=validate.granularity,
        ),
    ] = "chunk",
    window_sentences: Annotated[
        int,
        typer.Option(
            help="Sentences per window unit (--granularity window).",
            callback=validate.at_least(2),
        ),
    ] = 3,
    text_field: Annotated[str, typer.Option(help="Text field of JSONL/CSV/JSON records.")] = "text",
    id_field: Annotated[
        str | None, typer.Option(help="Id field of records (default: file and line).")
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace a knowledge base already there (and its calibration and tripwires)."
        ),
    ] = False,
    delete_other_files: Annotated[
        bool,
        typer.Option(
            help="With --overwrite: also delete files in --out that ragbound did not write."
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Load, chunk and embed a corpus into a new knowledge-base directory.

    Folders are read recursively; hidden files and unsupported file types in them are
    skipped. A .txt or .md file is one document. Each record of a .jsonl, .json, .csv or .tsv
    file is one document: its text is --text-field, its id --id-field (default: file and
    line), and its other fields are kept as metadata. Empty documents are skipped.

    The text is split into sentences (blingfire) and packed into chunks of whole sentences; only
    a sentence longer than --chunk-words is cut. Then each chunk is embedded.

    --granularity sentence or window also indexes finer units cut from each chunk: its
    sentences, or every run of --window-sentences consecutive sentences. A search then scores
    each chunk by its most similar unit (a question about one sentence is not diluted by the
    rest of its chunk) and still returns chunks as evidence. It costs one vector per unit
    (about 10 per 200-word chunk for sentences) and a search over them. calibrate
    --granularity picks among the units indexed; check uses the calibration's. --json prints
    path, n_documents, n_chunks, embedder, granularity, n_units and
    fingerprint. A duplicate document id, a corpus
    with no documents, or a knowledge base already in --out (without --overwrite) is an error.

    --overwrite replaces the knowledge base in place: the new files are written beside the
    old ones and one manifest replace commits them, so a crash leaves the old knowledge base
    or the new one, never neither. It removes the old calibration and tripwires (they were
    made for the old chunks) and says so. Files in --out that ragbound did not write are an
    error that names them, unless --delete-other-files. A folder left by a crashed index is
    cleaned and reused. Another writer of --out is waited for ($RAGBOUND_LOCK_TIMEOUT s).
    """
    from ragbound.corpus.units import unit_params
    from ragbound.knowledge import KnowledgeBase, check_index_target

    # refuse before embedding; checked again under the lock when saving
    check_index_target(out, overwrite=overwrite, delete_other_files=delete_other_files)
    kb = KnowledgeBase.build(
        corpus,
        embedder=embedder,
        chunk_words=chunk_words,
        overlap=overlap,
        text_field=text_field,
        id_field=id_field,
        units=unit_params(granularity, window_sentences),
        progress=progress(json_out),
    )
    kb.save(
        out,
        overwrite=overwrite,
        delete_other_files=delete_other_files,
        on_wait=notice,
        notify=notice,
    )
    _report_kb(kb, "indexed", json_out)


def add(
    kb_dir: Annotated[Path, typer.Argument(help="Existing knowledge-base directory.")],
    corpus: Annotated[list[Path], typer.Argument(help="Files or folders to add.")],
    json_out: JsonOpt = False,
) -> None:
    """Add documents to a knowledge base; only the new chunks are embedded.

    The files are read as by index, with the knowledge base's text and id fields. Stored
    chunks and their vectors are not touched. A document id already in the knowledge base is
    an error, and then nothing changes. --json prints the same fields as index.

    Adding changes the knowledge base's fingerprint, so calibrate again afterwards: check,
    evaluate and shift refuse a calibration made before (unless --force); add warns when it
    made the calibration stale. Two adds at once both land: the second waits for the first
    ($RAGBOUND_LOCK_TIMEOUT s), then appends to what the first committed.
    """
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.load(kb_dir)
    added = kb.add(corpus, progress=progress(json_out))
    kb.save(on_wait=notice)
    _warn_if_calibration_stale(kb)
    _report_kb(kb, f"added {added} chunks to", json_out)


def _warn_if_calibration_stale(kb: KnowledgeBase) -> None:
    """Say so when the knowledge base's calibration was made against another fingerprint."""
    from ragbound.artifacts import read_json
    from ragbound.detect.calibration import CALIBRATION_DIR, Calibration
    from ragbound.errors import ArtifactError

    if kb.path is None or not Calibration.exists(kb.path):
        return
    path = kb.path / CALIBRATION_DIR / "manifest.json"
    try:  # the add is committed: an unreadable calibration is only stale too, not an error
        made_for = read_json(path, "calibration manifest").get("kb_fingerprint")
    except (ArtifactError, AttributeError):
        made_for = "unknown"
    if made_for != kb.fingerprint:
        notice(
            f"warning: the calibration in {path.parent} was made against knowledge base "
            f"{made_for}, now {kb.fingerprint}: calibrate again "
            f"(ragbound calibrate {kb.path} --queries FILE)"
        )


def _report_kb(kb, verb: str, json_out: bool) -> None:
    m = kb.manifest
    if json_out:
        emit_json(
            {
                "path": str(kb.path),
                "n_documents": m.n_documents,
                "n_chunks": m.n_chunks,
                "embedder": m.embedder.name,
                "granularity": ",".join(m.units.granularity),
                "n_units": sum(s.n_units for s in m.segments),
                "fingerprint": kb.fingerprint,
            }
        )
        return
    console().print(
        f"{verb} [bold]{kb.path}[/]: {m.n_documents} documents, {m.n_chunks} chunks, "
        f"embedder {m.embedder.name} ({m.embedder.similarity}), fingerprint {kb.fingerprint}"
    )


def register(app: typer.Typer) -> None:
    """Add ``index`` and ``add`` to ``app``."""
    app.command("index")(index)
    app.command("add")(add)
