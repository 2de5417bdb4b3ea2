"""ragbound's sentence splitter against blingfire, the one it replaced, on the corpus zoo.

Each corpus's documents, as the benchmarks index them (PubMedQA's abstract paragraphs,
COVID-QA's articles, BANKING77-OOS's training queries, CLAP NQ's passages per title,
doc2dial's documents), are split by both. Per corpus: the share of documents split
identically, the sentence boundaries (a boundary is a position among the text's
non-space characters) both put, and the documents whose chunks (``chunk_document``'s
default 200 words, overlap 40) are identical; identical chunks give the same knowledge base.
Every boundary where the two disagree in a document whose chunks differ is listed, with the
words around it. blingfire comes with the dev extra (``pip install -e '.[dev]'``).

    python -m benchmarks.run sentences           # about a minute
    python -m benchmarks.run sentences render    # the section again from bench_out/
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from benchmarks import conversations, datasets, near, zoo
from benchmarks.doc import markdown_table, measured_or_saved, write_section
from ragbound.corpus import Document
from ragbound.corpus.chunker import pack_sentences
from ragbound.corpus.sentences import split_sentences

OUT = datasets.REPO / "bench_out"
RAW = OUT / "sentences.json"
TITLE = "Sentence splitting: ragbound's rules against blingfire"
CONTEXT_WORDS = 4  # words shown on each side of a boundary the splitters disagree on
MARK = "\N{DOUBLE VERTICAL LINE}"  # where the boundary falls among those words
SHARES = ("identical", "boundaries", "chunks")


def corpora(
    out: Path = OUT,
) -> dict[str, tuple[Callable[[], str | None], Callable[[], list[Document]]]]:
    """Corpus name -> (why it cannot be read here, or None; its documents as the zoo and the
    conversations benchmark index them). PubMedQA's corpus file is written into ``out``."""
    return {
        "PubMedQA": (datasets.missing_reason, near.pubmedqa_documents(out)),
        "COVID-QA": (datasets.covidqa_missing_reason, near.covid_documents),
        "BANKING77-OOS": (datasets.banking77oos_missing_reason, zoo.banking_documents),
        "CLAP NQ": (datasets.clapnq_missing_reason, zoo.clapnq_documents),
        "doc2dial": (
            conversations.missing_reason,
            lambda: list(conversations.load_corpus().documents),
        ),
    }


def blingfire_sentences(text: str) -> list[str]:
    """blingfire's sentences of ``text``, whitespace collapsed as ragbound's are."""
    import blingfire  # the dev extra

    lines = (" ".join(line.split()) for line in blingfire.text_to_sentences(text).split("\n"))
    return [line for line in lines if line]


def boundaries(sentences: Sequence[str]) -> set[int]:
    """Where each sentence but the last ends, counted in non-space characters."""
    ends, position = set(), 0
    for sentence in sentences[:-1]:
        position += sum(not ch.isspace() for ch in sentence)
        ends.add(position)
    return ends


def context(text: str, boundary: int) -> str:
    """The words around ``boundary`` (non-space characters into ``text``), MARK at it."""
    words, seen = text.split(), 0
    for i, word in enumerate(words):
        seen += len(word)
        if seen >= boundary:
            before = words[max(0, i + 1 - CONTEXT_WORDS) : i + 1]
            return " ".join([*before, MARK, *words[i + 1 : i + 1 + CONTEXT_WORDS]])
    return " ".join(words[-CONTEXT_WORDS:])


def compare(documents: Iterable[Document]) -> dict:
    """Both splitters on ``documents``: counts, seconds each, and the boundaries they
    disagree on in documents whose chunks differ."""
    counts: dict = dict.fromkeys(COUNTS, 0) | {"seconds_ours": 0.0, "seconds_blingfire": 0.0}
    differences: list[dict[str, str]] = []
    for doc in documents:
        start = time.perf_counter()
        ours = split_sentences(doc.text)
        middle = time.perf_counter()
        theirs = blingfire_sentences(doc.text)
        counts["seconds_ours"] += middle - start
        counts["seconds_blingfire"] += time.perf_counter() - middle
        counts["characters"] += len(doc.text)
        if not tally(counts, ours, theirs):
            differences += disagreements(doc, ours, theirs)
    return {**counts, "differences": differences}


COUNTS = (
    "documents",
    "characters",
    "identical",
    "ours",
    "blingfire",
    "agreed",
    "sentences",
    "sentences_new",
    "chunks_identical",
    "chunks",
    "chunks_new",
)


def tally(counts: dict, ours: list[str], theirs: list[str]) -> bool:
    """Add one document's sentences by both splitters to ``counts``; are its chunks the same?
    (``*_new``: ragbound's sentences and chunks that blingfire's do not include.)"""
    ends_ours, ends_theirs = boundaries(ours), boundaries(theirs)
    chunks_ours, chunks_theirs = pack_sentences(ours), pack_sentences(theirs)
    found = {
        "documents": 1,
        "identical": ours == theirs,
        "ours": len(ends_ours),
        "blingfire": len(ends_theirs),
        "agreed": len(ends_ours & ends_theirs),
        "sentences": len(ours),
        "sentences_new": len(set(ours) - set(theirs)),
        "chunks_identical": chunks_ours == chunks_theirs,
        "chunks": len(chunks_ours),
        "chunks_new": len(set(chunks_ours) - set(chunks_theirs)),
    }
    for key, value in found.items():
        counts[key] += value
    return chunks_ours == chunks_theirs


def disagreements(doc: Document, ours: list[str], theirs: list[str]) -> list[dict[str, str]]:
    """Every boundary only one splitter puts in ``doc``, with the words around it."""
    ends_ours, ends_theirs = boundaries(ours), boundaries(theirs)
    return [
        {"document": doc.id, "only": only, "context": context(doc.text, end)}
        for only, ends in (
            ("ragbound", ends_ours - ends_theirs),
            ("blingfire", ends_theirs - ends_ours),
        )
        for end in sorted(ends)
    ]


def measure(out: Path = OUT) -> dict:
    """Every corpus present (the others under "skipped", with the reason); files it writes go
    into ``out``."""
    try:
        import blingfire  # noqa: F401
    except ImportError:
        return {"skipped": {"all": "blingfire is not installed (the dev extra)"}}
    results: dict = {"corpora": {}, "skipped": {}}
    for name, (missing_reason, documents) in corpora(out).items():
        reason = missing_reason()
        if reason:
            results["skipped"][name] = reason
            continue
        results["corpora"][name] = compare(documents())
        print(f"{name}: {results['corpora'][name]['documents']} documents compared")
    return results


def in_order(results: dict) -> dict[str, dict]:
    """The measured corpora in the order :func:`corpora` lists them, any other after them
    (saved results come back with their keys sorted)."""
    order = {name: i for i, name in enumerate(corpora())}
    return dict(sorted(results["corpora"].items(), key=lambda item: order.get(item[0], len(order))))


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def shares(row: dict) -> dict[str, float | None]:
    """A corpus's agreement as shares: documents split identically, boundaries agreed of
    those either splitter puts, documents with identical chunks."""
    either = row["ours"] + row["blingfire"] - row["agreed"]
    return {
        "identical": _share(row["identical"], row["documents"]),
        "boundaries": _share(row["agreed"], either),
        "chunks": _share(row["chunks_identical"], row["documents"]),
    }


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def agreement_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """One row per corpus, then the mean and the worst corpus of each share."""
    header = [
        "corpus",
        "documents",
        "split identically",
        "boundaries: blingfire / ours / both",
        "boundaries agreeing (of either's)",
        "chunks identical (documents)",
        "ragbound's sentences / chunks not among blingfire's",
    ]
    rows, by_corpus = [], {}
    for name, row in in_order(results).items():
        by_corpus[name] = shares(row)
        counts = f"{row['blingfire']:,} / {row['ours']:,} / {row['agreed']:,}"
        rows.append(
            [
                name,
                f"{row['documents']:,}",
                _cell(by_corpus[name]["identical"]),
                counts,
                _cell(by_corpus[name]["boundaries"]),
                f"{_cell(by_corpus[name]['chunks'])} ({row['chunks_identical']:,})",
                f"{row['sentences_new']:,} of {row['sentences']:,} / "
                f"{row['chunks_new']:,} of {row['chunks']:,}",
            ]
        )
    for label, pick in (("mean over corpora", _mean), ("worst corpus", _worst)):
        cells = [pick({n: s[key] for n, s in by_corpus.items()}) for key in SHARES]
        rows.append([label, "", cells[0], "", cells[1], cells[2], ""])
    return header, rows


def _mean(values: dict[str, float | None]) -> str:
    known = [v for v in values.values() if v is not None]
    return _cell(sum(known) / len(known)) if known else "n/a"


def _worst(values: dict[str, float | None]) -> str:
    known = {name: v for name, v in values.items() if v is not None}
    if not known:
        return "n/a"
    name = min(known, key=lambda n: known[n])
    return f"{_cell(known[name])} ({name})"


def speed_line(results: dict) -> str:
    """Both splitters' throughput over every corpus compared (one pass, this machine)."""
    rows = results["corpora"].values()
    megabytes = sum(row["characters"] for row in rows) / 1e6
    ours = sum(row["seconds_ours"] for row in rows)
    theirs = sum(row["seconds_blingfire"] for row in rows)
    return (
        f"Speed over the {megabytes:.1f} million characters compared, one pass: ragbound "
        f"{ours:.1f} s, blingfire {theirs:.1f} s."
    )


def sentences_markdown(results: dict) -> list[str]:
    """The section's lines: the agreement table, speed, and every disagreement in a document
    whose chunks differ."""
    if not results.get("corpora"):
        return [f"Not measured: {reason}" for reason in results.get("skipped", {}).values()]
    header, rows = agreement_table(results)
    lines = [
        "Each corpus's documents as the benchmarks index them, split by ragbound's rules "
        "(`ragbound.corpus.sentences`) and by blingfire 0.1.8. A boundary is where a sentence "
        "ends, counted in non-space characters; *of either's*: those both put over those "
        "either puts. Chunks: `chunk_document`'s defaults (200 words, overlap 40). "
        "BANKING77-OOS's queries are one sentence each (no boundaries: n/a).",
        "",
        *markdown_table(header, rows),
        "",
        speed_line(results),
    ]
    differing = [
        [corpus, f"`{d['document']}`".replace("|", "\\|"), d["only"], d["context"]]
        for corpus, row in in_order(results).items()
        for d in row["differences"]
    ]
    if differing:
        lines += [
            "",
            "**Where the chunks differ**: every boundary put by one splitter only, in the "
            f"documents whose chunks are not identical ({MARK} marks the boundary).",
            "",
            *markdown_table(
                ["corpus", "document", "boundary only by", "words around it"], differing
            ),
        ]
    lines += [f"Not measured, {name}: {why}" for name, why in results["skipped"].items()]
    return lines


def write(results: dict) -> Path:
    return write_section("sentences", TITLE, "\n".join(sentences_markdown(results)))


def main(argv: Sequence[str] = ()) -> dict:
    """Measure (or, with ``render``, read back), save the raw numbers, write the section."""
    results = measured_or_saved(argv, RAW, measure, "sentences")
    print("\n".join(sentences_markdown(results)))
    print(f"raw numbers: {RAW}; section written to {write(results)}")
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
