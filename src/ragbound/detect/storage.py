"""Where a guard's calibration is saved: inside the knowledge base's folder, or in a folder of
the caller's for knowledge with none of its own; with the vectors of the questions the
tripwires' calibrated floor is measured on, so that a load does not embed them again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragbound.detect.calibration import Calibration
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Knowledge

if TYPE_CHECKING:
    from ragbound.tripwires.floor import Reference


def floor_reference(kb: Knowledge, calibration: Calibration) -> Reference:
    """The calibration's questions the tripwires' calibrated floor is measured on
    (:class:`~ragbound.tripwires.floor.Reference`), with the vectors the calibration kept for
    this knowledge (else embedded at their first search)."""
    from ragbound.tripwires.floor import Reference, reference_texts  # detect stays light

    texts = reference_texts(calibration.queries)
    kept = calibration.reference_for(texts, kb.fingerprint)
    return Reference(texts, source=calibration.manifest.id, vectors=kept)


def save_calibration(
    kb: Knowledge,
    calibration: Calibration,
    reference: Reference,
    *,
    folder: str | Path | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Path:
    """Save ``calibration`` inside ``kb``'s folder, or in ``folder`` (created if missing; its
    ``calibration/`` subfolder is replaced) for knowledge with no folder of its own
    (:meth:`Calibration.save`). With a vector search the ``reference`` questions' vectors are
    searched (once: not again if a decision did) and kept with it."""
    _keep_reference(kb, calibration, reference)
    if folder is not None:
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        return calibration.save(target, on_wait=on_wait, standalone=True)
    if kb.path is None:
        raise InputError(
            "this knowledge has no folder and the calibration lives inside one: save the "
            "knowledge base first, or save the calibration in a folder of your choice "
            "(guard.save(folder=...))"
        )
    return calibration.save(kb.path, on_wait=on_wait)


def _keep_reference(kb: Knowledge, calibration: Calibration, reference: Reference) -> None:
    """Give the calibration the reference questions' vectors to save (a vector search)."""
    if not len(reference) or kb.store.query_kind != "vector":
        return
    vectors = reference.searched(kb)
    assert isinstance(vectors, np.ndarray)
    calibration.keep_reference(vectors, reference.texts, kb.fingerprint)
