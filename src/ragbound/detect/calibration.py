"""A calibration: in-knowledge queries and their top-k similarities, saved beside a KB.

Layout (inside the knowledge-base directory)::

    calibration/manifest.json          detector config (k, tau, statistic, ...), KB fingerprint
    calibration/<id>.queries.jsonl     the calibration queries, in order
    calibration/<id>.similarities.npy  float64 (n_queries, k), rows sorted descending
    calibration/<id>.reference.npy     optional: the tripwire floor's reference questions'
                                       vectors (n <= 2000, dimension), as the search takes them

With a reranker (``DetectorConfig.reranker``) the rows are the cross-encoder's relevance
logits of the k retrieved chunks, sorted descending (:mod:`ragbound.detect.rerank`), and the
manifest records the model's revision so that a changed model is refused.

The similarity matrix is the whole null: any statistic can be computed from it later
without re-embedding, so ``check --statistic NAME`` needs no recalibration.

The reference vectors (:class:`ReferenceVectors`) spare a load embedding the questions the
tripwires' calibrated floor is measured on (up to 2,000: 10 s of MiniLM on two cores); they
are used only for the same knowledge and questions, else the questions are embedded at load.
float32 as the embedder gives them (float16 would move the floor by about 1e-3).

A save holds the knowledge base's writer lock, writes the data files under the new id, then
commits by replacing the manifest atomically: a crash leaves the previous calibration
loadable, and the next save removes what it left. The data files' SHA-256 is checked on load.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from ragbound._version import __version__
from ragbound.artifacts import (
    check_sha256,
    file_sha256,
    iter_jsonl,
    read_json,
    read_manifest,
    read_npy,
    sha256_text,
    utc_now,
    write_json,
    write_jsonl,
    write_npy,
)
from ragbound.corpus.provenance import QuestionOrigin
from ragbound.corpus.units import Granularity, granularity_label, parse_granularity
from ragbound.detect.answerability import AnswerabilityModel
from ragbound.detect.canary import Canary
from ragbound.detect.combined import CombinedModel, Selection
from ragbound.detect.config import DetectorConfig
from ragbound.detect.names import APPROXIMATE as APPROXIMATE  # re-exported
from ragbound.errors import ArtifactError, IncompatibleArtifactError
from ragbound.faults import crash_point
from ragbound.knowledge.layout import CALIBRATION_DIR, KB_FORMAT, LOCK_WHAT, MANIFEST
from ragbound.knowledge.manifest import KBManifest
from ragbound.locking import writer_lock
from ragbound.results import SyntheticCheck
from ragbound.stores import SearchInfo

CALIBRATION_FORMAT = "ragbound.calibration/1"
QuestionsLabel = Literal["real", "synthetic", "mixed", "unknown"]


class ReferenceVectors(BaseModel):
    """The reference questions' vectors kept with a calibration (``<id>.reference.npy``):
    ``n`` rows of ``dimension``, what the knowledge of fingerprint ``kb_fingerprint`` searches
    for the questions of hash ``texts_sha256`` (in order); ``sha256`` of the file."""

    n: int
    dimension: int
    dtype: str
    texts_sha256: str
    kb_fingerprint: str
    sha256: str | None = None


class NullQuestions(BaseModel):
    """Where the questions that make a calibration's null came from (``origin``).

    ``synthetic``: every one was written by an LLM, so the p-values are only approximate
    (``approximate``); ``real``: every one is a real question; ``mixed``: some synthetic,
    some not; ``unknown``: none is synthetic but some are of unknown origin (a file that does
    not say, and nothing declared). ``declared``: set by ``calibrate --questions`` (or
    ``Guard.calibrate(questions="real" | "synthetic")``) rather than read from the records
    (:mod:`ragbound.corpus.provenance`).
    """

    origin: QuestionsLabel = "unknown"
    n_real: int = 0
    n_synthetic: int = 0
    n_unknown: int = 0
    declared: bool = False

    @classmethod
    def of(cls, origins: Sequence[QuestionOrigin], *, declared: bool = False) -> NullQuestions:
        """The label and counts of the null's questions' origins."""
        counts = {name: origins.count(name) for name in ("real", "synthetic", "unknown")}
        return cls(
            origin=_label(counts, len(origins)),
            n_real=counts["real"],
            n_synthetic=counts["synthetic"],
            n_unknown=counts["unknown"],
            declared=declared,
        )

    @property
    def approximate(self) -> bool:
        """No real question is in the null: every one was written by an LLM."""
        return self.origin == "synthetic"

    def describe(self) -> str:
        """In words, e.g. ``"200 questions: 200 synthetic (from the records)"``."""
        counts = (
            ("real", self.n_real),
            ("synthetic", self.n_synthetic),
            ("of unknown origin", self.n_unknown),
        )
        parts = ", ".join(f"{n} {name}" for name, n in counts if n)
        how = "declared" if self.declared else "from the records"
        total = self.n_real + self.n_synthetic + self.n_unknown
        return f"{total} questions: {parts or 'none'} ({how})"


def _label(counts: dict[str, int], n: int) -> QuestionsLabel:
    if n and counts["synthetic"] == n:
        return "synthetic"
    if counts["synthetic"]:
        return "mixed"
    return "real" if n and counts["real"] == n else "unknown"


class CalibrationManifest(BaseModel):
    """What a calibration was made from and against, and the detector's parameters
    (``detector``, a :class:`DetectorConfig`)."""

    format: Literal["ragbound.calibration/1"] = CALIBRATION_FORMAT
    id: str
    library_version: str = __version__
    created_at: str
    kb_fingerprint: str
    detector: DetectorConfig
    n_queries: int
    queries_source: str = ""
    # how the calibration queries were searched (exact or approximate, with which parameters)
    search: SearchInfo
    # the units its queries were scored against
    granularity: tuple[Granularity, ...] = ("chunk",)
    # SHA-256 of the data files, checked on load; None in calibrations made before
    similarities_sha256: str | None = None
    queries_sha256: str | None = None
    # fingerprint of the reranker's files (model_revision); None without a reranker
    reranker_revision: str | None = None
    # calibrate --real-queries: the calibration queries compared with real user questions
    synthetic_check: SyntheticCheck | None = None
    # the learned score when detector.statistic is "combined" (plain JSON, its null inside)
    combined: CombinedModel | None = None
    # what calibrate --statistic auto compared and picked; None otherwise
    selection: Selection | None = None
    # a few calibration queries and their top-k as searched then (ragbound.detect.canary),
    # searched again at load; empty in calibrations made before they were recorded
    canaries: list[Canary] = []
    # where the null's questions came from
    questions: NullQuestions = NullQuestions()
    # what embedded the calibration queries of a local model ("torch" or "onnx"; their vectors
    # agree to the cosine checked at export, so either runtime checks against this null); None
    # for servers, BM25 and calibrations made before it was recorded
    embed_runtime: str | None = None
    # how the conversations among its queries were read into the texts searched
    # (ragbound.conversations.reading: follow, recent, last, rewrite); Gate.load checks with it by
    # default. None: standalone questions only, and calibrations made before it was recorded
    reading: str | None = None
    # the answerability test (ragbound.detect.answerability), calibrated on the same
    # questions; None: off (the relevance test alone, at the whole alpha)
    answerability: AnswerabilityModel | None = None
    # the tripwire floor's reference questions' vectors; None: not kept (embedded at load)
    reference: ReferenceVectors | None = None

    @property
    def n_learning(self) -> int:
        """How many queries taught the learned score or ranked auto's candidates (0: none)."""
        if self.selection is not None:
            return self.selection.n_learning
        return 0 if self.combined is None else self.combined.n_learning


class Calibration:
    """In-knowledge calibration data for one knowledge base."""

    def __init__(
        self,
        manifest: CalibrationManifest,
        queries: list[str],
        similarities: np.ndarray,
        reference: np.ndarray | None = None,
    ):
        self.manifest = manifest
        self.queries = queries
        self.similarities = similarities
        self.reference = reference  # the manifest's ReferenceVectors' rows (None: not kept)

    def keep_reference(
        self, vectors: np.ndarray, texts: Sequence[str], kb_fingerprint: str
    ) -> None:
        """Keep ``vectors``, what knowledge ``kb_fingerprint`` searches for the reference
        questions ``texts``, to be saved with this calibration."""
        if vectors.ndim != 2 or len(vectors) != len(texts) or not np.isfinite(vectors).all():
            raise ArtifactError(
                f"reference vectors must be finite, one row per question ({len(texts)}); got "
                f"shape {vectors.shape}"
            )
        self.reference = vectors
        entry = ReferenceVectors(
            n=len(texts),
            dimension=vectors.shape[1],
            dtype=str(vectors.dtype),
            texts_sha256=sha256_text(*texts),
            kb_fingerprint=kb_fingerprint,
        )
        self.manifest = self.manifest.model_copy(update={"reference": entry})

    def reference_for(self, texts: Sequence[str], kb_fingerprint: str) -> np.ndarray | None:
        """The kept vectors of the reference questions ``texts`` for knowledge
        ``kb_fingerprint``; None when none were kept, or for other questions or knowledge."""
        entry = self.manifest.reference
        if self.reference is None or entry is None or entry.kb_fingerprint != kb_fingerprint:
            return None
        return self.reference if entry.texts_sha256 == sha256_text(*texts) else None

    @classmethod
    def create(
        cls,
        queries: Sequence[str],
        similarities: np.ndarray,
        *,
        kb_fingerprint: str,
        config: DetectorConfig,
        search: SearchInfo,
        queries_source: str = "",
        reranker_revision: str | None = None,
        granularity: Sequence[str] = ("chunk",),
        combined: CombinedModel | None = None,
        selection: Selection | None = None,
    ) -> Calibration:
        sims = np.ascontiguousarray(similarities, dtype=np.float64)
        created = utc_now()
        manifest = CalibrationManifest(
            # the random part: two calibrations of one second and one query set differ
            id=sha256_text(kb_fingerprint, created, secrets.token_hex(8), *queries)[:12],
            created_at=created,
            kb_fingerprint=kb_fingerprint,
            detector=config,
            n_queries=len(queries),
            queries_source=queries_source,
            search=search,
            reranker_revision=reranker_revision,
            granularity=parse_granularity(granularity),
            combined=combined,
            selection=selection,
        )
        return cls(manifest, list(queries), sims)

    def check_compatible(self, kb_fingerprint: str, *, force: bool = False) -> None:
        """Refuse a knowledge base other than the one this calibration was made against."""
        if force or kb_fingerprint == self.manifest.kb_fingerprint:
            return
        raise IncompatibleArtifactError(
            f"this calibration was made against knowledge base {self.manifest.kb_fingerprint}, "
            f"not {kb_fingerprint} (its chunks or embedder changed): calibrate again with "
            "ragbound calibrate, or force it (--force) if you know the null still holds"
        )

    def granularity_for(
        self, requested: str | Sequence[str] | None, *, force: bool = False
    ) -> tuple[Granularity, ...]:
        """The units to search: this calibration's, or ``requested`` if it is the same.

        Another granularity is refused (IncompatibleArtifactError) unless ``force``: the null
        was measured on best-unit similarities of the calibration's units, and other units
        give other similarities (sentences match closer than whole chunks).
        """
        made = self.manifest.granularity
        if requested is None:
            return made
        wanted = parse_granularity(requested)
        if wanted == made or force:
            return wanted
        raise IncompatibleArtifactError(
            f"this calibration was made searching {granularity_label(made)} units, not "
            f"{granularity_label(wanted)}: calibrate again with --granularity "
            f"{granularity_label(wanted)}, or force it (--force) if you know the null still holds"
        )

    def check_search(self, current: SearchInfo, *, force: bool = False) -> None:
        """Refuse to test with a search other than the one the calibration used.

        An approximate index misses neighbours, so its top similarities are lower than exact
        ones: a null measured with one search gives wrong p-values for another (exact vs
        HNSW, or another ef_search). Exact searches are interchangeable.
        """
        recorded = self.manifest.search
        if force or recorded.same_results(current):
            return
        raise IncompatibleArtifactError(
            f"this calibration was made with {recorded.summary()}, but the knowledge base now "
            f"searches with {current.summary()}: its p-values would not hold (an approximate "
            "search returns lower top similarities). Calibrate again with the search you check "
            "with (ragbound calibrate KB --queries FILE), or pass --force (force=True) to use it "
            "anyway"
        )

    def save(
        self,
        kb_dir: Path,
        *,
        on_wait: Callable[[str], None] | None = None,
        standalone: bool = False,
    ) -> Path:
        """Commit this calibration in ``kb_dir``, holding the knowledge base's writer lock.

        Refused (IncompatibleArtifactError) when the knowledge base on disk is no longer the
        one calibrated against (it changed while the queries were being searched).
        ``on_wait`` is called once with a message if another writer holds the lock.
        ``standalone``: ``kb_dir`` is a folder of the caller's choice that holds no knowledge
        base (a calibration of a retriever ragbound does not own); the knowledge is then
        checked by its fingerprint when the calibration is loaded against it.
        """
        folder = kb_dir / CALIBRATION_DIR
        ident = self.manifest.id
        expected = (self.manifest.n_queries, self.manifest.detector.k)
        if self.similarities.shape != expected or not np.isfinite(self.similarities).all():
            raise ArtifactError(
                f"calibration similarities must be finite and of shape {expected}; got shape "
                f"{self.similarities.shape} (NaN or inf, or another shape): nothing was saved"
            )
        with writer_lock(kb_dir, what=LOCK_WHAT, on_wait=on_wait):
            if not standalone or (kb_dir / MANIFEST).is_file():
                self._check_kb_unchanged(kb_dir)
            _remove_unreferenced(folder, _committed_field(folder, "id"))  # what a crashed save left
            sims_path = folder / f"{ident}.similarities.npy"
            queries_path = folder / f"{ident}.queries.jsonl"
            write_npy(sims_path, self.similarities)
            crash_point("calibration.save:similarities-written")
            write_jsonl(queries_path, ({"query": q} for q in self.queries))
            reference = self._write_reference(folder / f"{ident}.reference.npy")
            crash_point("calibration.save:data-written")
            self.manifest = self.manifest.model_copy(
                update={
                    "similarities_sha256": file_sha256(sims_path),
                    "queries_sha256": file_sha256(queries_path),
                    "reference": reference,
                }
            )
            write_json(folder / "manifest.json", self.manifest.model_dump(mode="json"))
            crash_point("calibration.save:committed")
            _remove_unreferenced(folder, ident)  # the calibration it replaced
        return folder

    def _write_reference(self, path: Path) -> ReferenceVectors | None:
        """Write the reference vectors kept (if any); their manifest entry with the file's
        SHA-256."""
        entry = self.manifest.reference
        if self.reference is None or entry is None:
            return None
        write_npy(path, self.reference)
        return entry.model_copy(update={"sha256": file_sha256(path)})

    def _check_kb_unchanged(self, kb_dir: Path) -> None:
        on_disk = read_manifest(
            kb_dir / MANIFEST, KBManifest, KB_FORMAT, "knowledge-base manifest"
        ).fingerprint
        if on_disk != self.manifest.kb_fingerprint:
            raise IncompatibleArtifactError(
                f"{kb_dir} changed while it was being calibrated (knowledge base "
                f"{self.manifest.kb_fingerprint}, now {on_disk}); nothing was saved: "
                "run ragbound calibrate again"
            )

    @classmethod
    def exists(cls, kb_dir: Path) -> bool:
        return (kb_dir / CALIBRATION_DIR / "manifest.json").is_file()

    @classmethod
    def stale_fingerprint(cls, kb_dir: Path, kb_fingerprint: str) -> str | None:
        """The fingerprint of the knowledge base the calibration in ``kb_dir`` was made
        against, when that is not ``kb_fingerprint`` (``"unknown"`` for a manifest that cannot
        be read: stale too); None when ``kb_dir`` has no calibration or it is current."""
        if not cls.exists(kb_dir):
            return None
        made_for = _committed_field(kb_dir / CALIBRATION_DIR, "kb_fingerprint") or "unknown"
        return None if made_for == kb_fingerprint else made_for

    @classmethod
    def load(cls, kb_dir: Path) -> Calibration:
        """Load and check a calibration; missing, corrupt or inconsistent files raise."""
        folder = kb_dir / CALIBRATION_DIR
        if not cls.exists(kb_dir):
            raise ArtifactError(
                f"{kb_dir} has no calibration yet: run "
                f"ragbound calibrate {kb_dir} --queries IN_KNOWLEDGE_FILE"
            )
        manifest = read_manifest(
            folder / "manifest.json",
            CalibrationManifest,
            CALIBRATION_FORMAT,
            "calibration manifest",
        )
        sims_path = folder / f"{manifest.id}.similarities.npy"
        queries_path = folder / f"{manifest.id}.queries.jsonl"
        check_sha256(sims_path, manifest.similarities_sha256, "calibration similarities")
        check_sha256(queries_path, manifest.queries_sha256, "calibration queries")
        sims = read_npy(sims_path, "calibration similarities")
        rows = iter_jsonl(queries_path, "calibration queries")
        queries = [str(row.get("query", "")) for row in rows]
        expected = (manifest.n_queries, manifest.detector.k)
        if sims.shape != expected or sims.dtype.kind != "f" or len(queries) != manifest.n_queries:
            raise ArtifactError(
                f"{folder}: files hold {len(queries)} queries and {sims.dtype} similarities "
                f"{sims.shape}, the manifest says {expected} floats"
            )
        if not np.isfinite(sims).all():
            raise ArtifactError(f"{sims_path}: calibration similarities hold NaN or inf")
        return cls(manifest, queries, sims, _read_reference(folder, manifest))


def _read_reference(folder: Path, manifest: CalibrationManifest) -> np.ndarray | None:
    """The reference vectors the manifest names, checked (None: none were kept)."""
    entry = manifest.reference
    if entry is None:
        return None
    path = folder / f"{manifest.id}.reference.npy"
    check_sha256(path, entry.sha256, "calibration reference vectors")
    vectors = read_npy(path, "calibration reference vectors")
    if vectors.shape != (entry.n, entry.dimension) or str(vectors.dtype) != entry.dtype:
        raise ArtifactError(
            f"{path}: holds {vectors.dtype} {vectors.shape}, the manifest says {entry.dtype} "
            f"({entry.n}, {entry.dimension})"
        )
    if not np.isfinite(vectors).all():
        raise ArtifactError(f"{path}: calibration reference vectors hold NaN or inf")
    return vectors


def _committed_field(folder: Path, name: str) -> str | None:
    """Field ``name`` of the committed manifest (None: no calibration, an unreadable one, or
    one without the field)."""
    try:
        return str(read_json(folder / "manifest.json", "calibration manifest")[name])
    except (ArtifactError, KeyError, TypeError):
        return None


def _remove_unreferenced(folder: Path, keep: str | None) -> None:
    """Delete data files of other calibrations and temporary files of interrupted writes.

    Called with the writer lock held, so no other writer is midway through a file here.
    """
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.name == "manifest.json" or (keep and path.name.startswith(f"{keep}.")):
            continue
        if path.is_file():
            path.unlink(missing_ok=True)
