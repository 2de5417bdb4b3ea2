"""``ragbound index`` and ``ragbound add``: build and grow a knowledge base."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import JsonOpt, console, emit_json, progress
from ragbound.errors import InputError


def index(
    corpus: Annotated[
        list[Path], typer.Argument(help="Files or folders (.txt .md .jsonl .csv .json).")
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
        typer.Option(help="Words of whole-sentence overlap.", callback=validate.non_negative_int),
    ] = 40,
    text_field: Annotated[str, typer.Option(help="Text field of JSONL/CSV/JSON records.")] = "text",
    id_field: Annotated[str | None, typer.Option(help="Id field of records.")] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace a knowledge base already there.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Load, chunk and embed a corpus into a knowledge-base directory."""
    from ragbound.knowledge import MANIFEST, KnowledgeBase

    if (out / MANIFEST).exists() and not overwrite:
        raise InputError(
            f"{out} already holds a knowledge base: add documents with ragbound add, "
            "or pass --overwrite to replace it"
        )
    kb = KnowledgeBase.build(
        corpus,
        embedder=embedder,
        chunk_words=chunk_words,
        overlap=overlap,
        text_field=text_field,
        id_field=id_field,
        progress=progress(json_out),
    )
    kb.save(out, overwrite=overwrite)
    _report_kb(kb, "indexed", json_out)


def add(
    kb_dir: Annotated[Path, typer.Argument(help="Existing knowledge-base directory.")],
    corpus: Annotated[list[Path], typer.Argument(help="Files or folders to add.")],
    json_out: JsonOpt = False,
) -> None:
    """Add documents to a knowledge base; only the new chunks are embedded."""
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.load(kb_dir)
    added = kb.add(corpus, progress=progress(json_out))
    kb.save()
    _report_kb(kb, f"added {added} chunks to", json_out)


def _report_kb(kb, verb: str, json_out: bool) -> None:
    m = kb.manifest
    if json_out:
        emit_json(
            {
                "path": str(kb.path),
                "n_documents": m.n_documents,
                "n_chunks": m.n_chunks,
                "embedder": m.embedder.name,
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
