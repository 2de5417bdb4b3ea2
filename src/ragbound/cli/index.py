"""``ragbound index``, ``ragbound add`` and ``ragbound attach``: build, grow or borrow a
knowledge base."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import (
    emit_json,
    notice,
    progress,
    say,
    shown,
    sigterm_interrupts,
    warnings_shown,
)
from ragbound.cli.options import JsonOpt, KbArg, NewKbOpt
from ragbound.errors import InputError

if TYPE_CHECKING:
    from ragbound.knowledge import KnowledgeBase
    from ragbound.stores.hnsw import HnswParams


def index(
    corpus: Annotated[
        list[Path], typer.Argument(help="Files or folders (.txt .md .jsonl .json .csv .tsv).")
    ],
    out: NewKbOpt,
    embedder: Annotated[
        str,
        typer.Option(
            help=(
                "minilm (default), mpnet, bm25, openai:MODEL (a server: see "
                "docs/embedders.md), or a local model folder."
            )
        ),
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
        str | None,
        typer.Option(
            help="Id field of records (default: a record's id field, or its key in a JSON "
            "object keyed by id, else file and line; @line: file and line always)."
        ),
    ] = None,
    group_field: Annotated[
        str | None,
        typer.Option(
            help="Field of JSONL/CSV/JSON records whose records, sharing its value, are one "
            "group for calibrate --statistic auto | combined (an intent, an FAQ category, an "
            "article title; default: each document alone)."
        ),
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
    backing: Annotated[
        str | None,
        typer.Option(
            help="postgresql://USER@HOST/DATABASE[?table=NAME&search=hnsw&ef_search=N]: keep "
            "chunks and vectors in a PostgreSQL + pgvector table ragbound creates (default "
            "table ragbound_<out folder>, exact search).",
            callback=validate.postgres_url,
        ),
    ] = None,
    search: Annotated[
        str,
        typer.Option(
            help="exact (every chunk, default) or hnsw (a local HNSW graph, approximate: the "
            "hnsw extra).",
            callback=validate.choice("exact", "hnsw"),
        ),
    ] = "exact",
    ef_search: Annotated[
        int | None,
        typer.Option(
            help="With --search hnsw: candidates per query (default 64; at least k are kept).",
            callback=validate.ef_search,
        ),
    ] = None,
    m: Annotated[
        int | None,
        typer.Option(
            "--m",
            help="With --search hnsw: links per node of the graph (default 16).",
            callback=validate.hnsw_m,
        ),
    ] = None,
    rescore: Annotated[
        int | None,
        typer.Option(
            help="With --search hnsw: take k x C approximate candidates and re-score them "
            "exactly from the stored vectors (0 = off, the default).",
            callback=validate.rescore,
        ),
    ] = None,
    graph_precision: Annotated[
        str | None,
        typer.Option(
            help="With --search hnsw: float32 (default) or float16 copies of the vectors in "
            "the graph (half the memory; similarities within about 1e-4 unless --rescore).",
            callback=validate.choice("float32", "float16"),
        ),
    ] = None,
    vector_dtype: Annotated[
        str,
        typer.Option(
            help="How the vectors are stored: float32, or float16 (half the disk and memory; "
            "AUROC unchanged on PubMedQA, exact search slower).",
            callback=validate.choice("float32", "float16"),
        ),
    ] = "float32",
    json_out: JsonOpt = False,
) -> None:
    """Load, chunk and embed a corpus into a new knowledge-base directory.

    Folders are read recursively; hidden files and unsupported file types in them are
    skipped. A .txt or .md file is one document. Each record of a .jsonl, .json, .csv or .tsv
    file is one document: its text is --text-field, its id --id-field (default: its id field,
    or its key in a JSON object keyed by id, else file and line; --id-field @line for file and
    line always), and its other fields are kept as metadata. Empty documents are skipped.
    Entries that are not regular files (FIFOs, sockets, symlink loops, ...) are skipped with
    one warning line; a file that cannot be read or is not UTF-8 text is an error
    (docs/input-files.md).

    --group-field NAME: records sharing the value of field NAME (an intent, an FAQ category,
    an article title) are one group when calibrate --statistic auto or combined leaves a
    question's documents out of the search; without it each document is left out alone. A
    record without the field is its own group; a field no record has is an error. Without
    --group-field, index suggests one in a line when the records carry a field that looks
    like a grouping, and never applies it on its own.

    The text is split into sentences and packed into chunks of whole sentences; only a
    sentence longer than --chunk-words is cut. Then each chunk is embedded. --granularity
    sentence or window also indexes finer units cut from each chunk (its sentences, or runs
    of --window-sentences sentences): a search scores each chunk by its most similar unit and
    still returns chunks as evidence, at one vector per unit. --vector-dtype float16 stores
    the vectors at half the size; searches compute in float32.

    --json prints path, n_documents, n_chunks, group_field, embedder, granularity, n_units,
    fingerprint, backing and search. A duplicate document id, a corpus with no documents, or
    a knowledge base already in --out (without --overwrite) is an error.

    --overwrite replaces the knowledge base in place, atomically (a crash leaves the old one
    or the new one), and removes its calibration and tripwires, saying so. Files in --out
    that ragbound did not write are an error naming them, unless --delete-other-files.
    Another writer of --out is waited for ($RAGBOUND_LOCK_TIMEOUT s). Embedded chunks are
    written to --out/staging/ block by block: the same command after an interruption embeds
    only the blocks not yet there (docs/reliability.md).

    --backing keeps the chunks and vectors in a PostgreSQL + pgvector table (the postgres
    extra; the password never in the manifest: PGPASSWORD or ~/.pgpass); --out must then be
    a new or empty folder, and --overwrite replaces only a table that ragbound created.
    --search hnsw builds a local HNSW graph (the hnsw extra) that answers every search
    approximately, its settings recorded with every calibration, so calibrate after
    choosing the search (docs/stores.md).
    """
    from ragbound.corpus.units import unit_params
    from ragbound.knowledge import KnowledgeBase

    with sigterm_interrupts(), warnings_shown():
        kb = KnowledgeBase.index(
            corpus,
            out,
            store=backing,
            hnsw=_hnsw_choice(search, ef_search, m, rescore, graph_precision),
            embedder=embedder,
            overwrite=overwrite,
            delete_other_files=delete_other_files,
            on_wait=notice,
            notify=notice,
            chunk_words=chunk_words,
            overlap=overlap,
            text_field=text_field,
            id_field=id_field,
            group_field=group_field,
            units=unit_params(granularity, window_sentences),
            progress=progress(json_out),
            vector_dtype=vector_dtype,
        )
    _report_kb(kb, "indexed", json_out)
    if group_field is None:
        _suggest_group_field(kb)


def _suggest_group_field(kb: KnowledgeBase) -> None:
    """One line naming a record field that looks like a grouping, when there is one."""
    from ragbound.corpus.groups import suggest_group_field

    records = {chunk.doc_id: chunk.metadata for chunk in kb.chunks}  # one per document
    found = suggest_group_field(list(records.values()))
    if found is not None:
        name, n_values = found
        notice(
            f"hint: the records' field {name!r} has {n_values} values, "
            f"{len(records) / n_values:.0f} records each on average; if each value is one "
            f"topic, index with --group-field {name} so that calibrate --statistic auto "
            "leaves a topic out whole"
        )


def _hnsw_choice(
    search: str,
    ef_search: int | None,
    m: int | None,
    rescore: int | None,
    precision: str | None,
) -> HnswParams | None:
    """The local HNSW parameters asked for (None: exact), checked before embedding."""
    options = {"--ef-search": ef_search, "--m": m, "--rescore": rescore}
    options["--graph-precision"] = precision
    given = [name for name, value in options.items() if value is not None]
    if search == "exact":
        if given:
            raise InputError(f"{', '.join(given)} apply to --search hnsw only")
        return None
    from ragbound.stores.hnsw import DEFAULT_EF_SEARCH, DEFAULT_M, hnsw_params, require_faiss

    require_faiss()
    return hnsw_params(
        m=DEFAULT_M if m is None else m,
        ef_search=DEFAULT_EF_SEARCH if ef_search is None else ef_search,
        rescore=rescore or 0,
        precision=precision or "float32",
    )


def add(
    kb_dir: KbArg,
    corpus: Annotated[list[Path], typer.Argument(help="Files or folders to add.")],
    json_out: JsonOpt = False,
) -> None:
    """Add documents to a knowledge base; only the new chunks are embedded.

    The files are read as by index, with the knowledge base's text and id fields. Stored
    chunks and their vectors are not touched. A document id already in the knowledge base is
    an error, and then nothing changes. --json prints the same fields as index.

    Adding changes the knowledge base's fingerprint, so calibrate again afterwards: decide,
    evaluate and shift refuse a calibration made before (unless --force); add warns when it
    made the calibration stale. Two adds at once both land: the second waits for the first
    ($RAGBOUND_LOCK_TIMEOUT s), then appends to what the first committed.
    """
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.load(kb_dir)
    with warnings_shown():
        added = kb.add(corpus, progress=progress(json_out))
    kb.save(on_wait=notice)
    _warn_if_calibration_stale(kb)
    _report_kb(kb, f"added {added} chunks to", json_out)


def attach(
    url: Annotated[
        str,
        typer.Argument(
            help="postgresql://USER@HOST/DATABASE (password from PGPASSWORD or ~/.pgpass), "
            "chroma://HOST:PORT/COLLECTION[?tenant=T&database=D], qdrant://HOST:PORT/COLLECTION, "
            "qdrant+path:///FOLDER?collection=NAME (a folder of qdrant-client's embedded mode), "
            "or lancedb:///FOLDER?table=NAME (a LanceDB folder).",
            callback=validate.attach_url,
        ),
    ],
    out: NewKbOpt,
    table: Annotated[
        str | None,
        typer.Option(
            help="PostgreSQL: table (NAME or SCHEMA.NAME) holding the rows.",
            callback=validate.table_name,
        ),
    ] = None,
    text_column: Annotated[
        str | None,
        typer.Option(
            help="PostgreSQL: column of the chunk texts (default: text, document or content, "
            "where LlamaIndex and LangChain put them).",
            callback=validate.column_name,
        ),
    ] = None,
    vector_column: Annotated[
        str | None,
        typer.Option(
            help="PostgreSQL: pgvector column of their embeddings (default: embedding); "
            "LanceDB: the vector column (default: the only one).",
            callback=validate.column_name,
        ),
    ] = None,
    id_column: Annotated[
        str | None,
        typer.Option(
            help="PostgreSQL: column identifying a row (default: the table's primary key); "
            "LanceDB: the column of each row's key (default id).",
            callback=validate.column_name,
        ),
    ] = None,
    text_field: Annotated[
        str | None,
        typer.Option(
            help="Qdrant: payload key of the chunk texts (default: found where LangChain, "
            "page_content, or LlamaIndex, _node_content, put them; a nested key as metadata.text); "
            "LanceDB: their column (default text)."
        ),
    ] = None,
    doc_field: Annotated[
        str | None,
        typer.Option(
            help="Chroma: metadata field, Qdrant: payload key, LanceDB: column, holding each "
            "record's document id (default: the record's, point's or row's id)."
        ),
    ] = None,
    vector_name: Annotated[
        str | None,
        typer.Option(help="Qdrant: the named vector to search, when the points have several."),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            help="COLUMN=VALUE (PostgreSQL; LanceDB, a struct's field as metadata.KEY), metadata "
            "FIELD=VALUE (Chroma) or payload KEY=VALUE (Qdrant): use only rows whose value "
            "equals it; repeat to combine.",
            callback=validate.column_filter,
        ),
    ] = None,
    embedder: Annotated[
        str,
        typer.Option(
            help=(
                "The embedder that made the stored vectors: minilm, mpnet, openai:MODEL or a "
                "model folder."
            )
        ),
    ] = "minilm",
    sample: Annotated[
        int,
        typer.Option(
            help="Stored texts to re-embed to check the embedder.", callback=validate.positive_int
        ),
    ] = 32,
    search: Annotated[
        str | None,
        typer.Option(
            help="exact (every row scored) or hnsw (the store's HNSW index: approximate). A "
            "Chroma collection is always searched by its HNSW graph.",
            callback=validate.choice("exact", "hnsw"),
        ),
    ] = None,
    ef_search: Annotated[
        int | None,
        typer.Option(
            help="PostgreSQL, with --search hnsw: candidates per query (pgvector's "
            "hnsw.ef_search, default 40).",
            callback=validate.ef_search,
        ),
    ] = None,
    hnsw_ef: Annotated[
        int | None,
        typer.Option(
            help="Qdrant server, with --search hnsw: candidates per query (default: the "
            "collection's ef_construct).",
            callback=validate.positive_int,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Use a store another application filled (a PostgreSQL + pgvector table, a Chroma or
    a Qdrant collection, a LanceDB table), without copying it.

    The vectors stay where they are, nothing is re-embedded: --out gets a manifest that
    records where they are (never a password), the table or collection, its columns or fields
    and filters, the embedder and a content hash, and searches run in the store. Before
    trusting the store, attach re-embeds --sample of its stored texts and refuses when they do
    not point the same way as the stored vectors (another embedder made them), or when the
    vectors have another dimension.

    The options of each store (docs/stores.md): PostgreSQL --table, --text-column,
    --vector-column, --id-column (defaulting to where LangChain and LlamaIndex put them),
    --where COLUMN=VALUE, --ef-search; Chroma --doc-field, --where FIELD=VALUE; Qdrant
    --text-field, --doc-field, --vector-name, --where KEY=VALUE, --hnsw-ef; LanceDB
    --text-field, --doc-field, --vector-column, --id-column, --where COLUMN=VALUE. An option
    the URL's store does not take is an error.

    Rows the application adds or changes are read at the next load: the fingerprint changes,
    so calibrate again (decide refuses the old calibration unless --force); add refuses: add
    documents through the application. A record flagged ragbound_tripwire is never a row.
    Search is exact unless --search hnsw (a Chroma collection: always its HNSW graph); the
    method is recorded with every calibration, so calibrate with the search you decide with.
    --json prints the same fields as index.
    """
    from ragbound.knowledge import KnowledgeBase
    from ragbound.knowledge.registry import attach_options

    options = attach_options(
        url,
        table=table,
        text_column=text_column,
        vector_column=vector_column,
        id_column=id_column,
        text_field=text_field,
        doc_field=doc_field,
        vector_name=vector_name,
        where=where or [],
        embedder=embedder,
        sample=sample,
        search=search,
        ef_search=ef_search,
        hnsw_ef=hnsw_ef,
    )
    kb = KnowledgeBase.attach(url, out, on_wait=notice, **options)
    _report_kb(kb, "attached", json_out)


def _warn_if_calibration_stale(kb: KnowledgeBase) -> None:
    """Say so when the knowledge base's calibration was made against another fingerprint."""
    from ragbound.detect.calibration import CALIBRATION_DIR, Calibration

    made_for = None if kb.path is None else Calibration.stale_fingerprint(kb.path, kb.fingerprint)
    if made_for is not None:
        notice(
            f"warning: the calibration in {kb.path / CALIBRATION_DIR} was made against "
            f"knowledge base {made_for}, now {kb.fingerprint}: calibrate again "
            f"(ragbound calibrate {kb.path} --queries FILE)"
        )


def _report_kb(kb: KnowledgeBase, verb: str, json_out: bool) -> None:
    """What index, add and attach print (and where the rows live, for an outside store)."""
    m = kb.manifest
    search = kb.describe()
    location = getattr(kb.backing, "location", None)
    if json_out:
        emit_json(
            {
                "path": str(kb.path),
                "n_documents": m.n_documents,
                "n_chunks": m.n_chunks,
                "group_field": m.group_field,
                "embedder": m.embedder.name,
                "granularity": ",".join(m.units.granularity),
                "n_units": sum(s.n_units for s in m.segments),
                "fingerprint": kb.fingerprint,
                "backing": m.backing.model_dump(mode="json"),
                "search": search.model_dump(mode="json"),
            }
        )
        return
    where = "" if location is None else f", rows in {location.describe()}"
    if not search.exact:
        where += f", search {search.summary()}"
    if m.group_field is not None:
        where += f", grouped by {shown(m.group_field)} ({len(set(kb.groups()))} groups)"
    say(
        f"{verb} [bold]{shown(str(kb.path))}[/]: {m.n_documents} documents, {m.n_chunks} chunks, "
        f"embedder {m.embedder.name} ({m.embedder.similarity}), fingerprint {kb.fingerprint}"
        f"{where}"
    )


def register(app: typer.Typer) -> None:
    """Add ``index``, ``add`` and ``attach`` to ``app``."""
    app.command("index")(index)
    app.command("add")(add)
    app.command("attach")(attach)
