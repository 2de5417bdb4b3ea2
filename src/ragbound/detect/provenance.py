"""What a calibration records of where it came from, for the checks made later: its canaries
(searched again at load, :mod:`ragbound.detect.canary`), where the null's questions came from
(:class:`~ragbound.detect.calibration.NullQuestions`), what embedded them, and how the
conversations among them were read."""

from __future__ import annotations

from collections.abc import Mapping

from ragbound.conversations.reading import check_reading
from ragbound.corpus.provenance import DeclaredOrigin, QuestionOrigin, origins_of
from ragbound.detect.calibration import Calibration, NullQuestions
from ragbound.detect.canary import record_canaries
from ragbound.embedders.base import DenseEmbedder
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Knowledge

Questions = DeclaredOrigin | Mapping[str, QuestionOrigin]
"""Where calibration questions came from: all real, all synthetic, or each by its text."""


def record_provenance(kb: Knowledge, calibration: Calibration, questions: Questions | None) -> None:
    """Keep in ``calibration``'s manifest what a later check compares: its canaries searched
    on ``kb`` now, where the null's questions came from (``questions`` as in
    :meth:`ragbound.detect.guard.Guard.calibrate`; None: read from nowhere, unknown) and what
    embedded them (``torch``, ``onnx``; None for servers and text search)."""
    queries = calibration.queries
    embedder = kb.query_embedder()
    origins = origins_of(queries, questions)
    update = {
        "canaries": record_canaries(kb, queries, calibration.manifest.detector.k),
        "questions": NullQuestions.of(origins, declared=isinstance(questions, str)),
        "embed_runtime": embedder.info.runtime if isinstance(embedder, DenseEmbedder) else None,
    }
    calibration.manifest = calibration.manifest.model_copy(update=update)


def record_reading(calibration: Calibration, reading: str | None) -> None:
    """Keep in ``calibration``'s manifest the reading (:mod:`ragbound.conversations.reading`)
    the conversations among its queries were read with; None: standalone questions only."""
    if reading is not None:
        try:
            check_reading(reading)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    calibration.manifest = calibration.manifest.model_copy(update={"reading": reading})
