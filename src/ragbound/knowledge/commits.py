"""A knowledge-base folder's commits: reading the last one, and knowing when a writer is behind.

Writers take the folder's lock (:func:`ragbound.locking.writer_lock`, shared with the
calibration and the tripwires stored there) and commit by replacing ``manifest.json``.
Readers take no lock: they read the last committed manifest, and read again should a writer
replace it while they read.
"""

from __future__ import annotations

from pathlib import Path

from ragbound.artifacts import read_manifest
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import Backing, Contents, Loaded
from ragbound.knowledge.layout import KB_FORMAT, MANIFEST
from ragbound.knowledge.manifest import KBManifest, read_committed
from ragbound.knowledge.registry import backing_of
from ragbound.knowledge.segments import manifest_stamp, same_dir

LOAD_ATTEMPTS = 3  # a reader reads again when a writer replaced the knowledge base meanwhile


def load_committed(root: Path) -> tuple[Backing, Loaded]:
    """The backing of the knowledge base committed in ``root`` and what it read, checked
    against the manifest; read again (up to ``LOAD_ATTEMPTS`` times) when a writer committed
    while it read. InputError when there is no such folder."""
    if not root.is_dir():
        raise InputError(f"knowledge base {root} does not exist (build it with ragbound index)")
    for attempt in range(LOAD_ATTEMPTS):
        stamp = manifest_stamp(root)
        try:
            manifest = read_manifest(
                root / MANIFEST, KBManifest, KB_FORMAT, "knowledge-base manifest"
            )
            backing = backing_of(manifest.backing)
            return backing, backing.load(root, manifest)
        except ArtifactError:
            if attempt + 1 == LOAD_ATTEMPTS or manifest_stamp(root) == stamp:
                raise  # damage, not a commit that happened while reading
    raise AssertionError("unreachable")


def behind(contents: Contents, backing: Backing, target: Path) -> bool:
    """Saving into the folder ``contents`` was loaded from appends to what is committed there
    now: True when another writer committed there since (for a backing that can add)."""
    if contents.path is None or not same_dir(target, contents.path):
        return False
    if not backing.capabilities.add:
        return False
    committed = read_committed(target)
    return committed is not None and [s.name for s in committed.segments] != list(
        contents.base_names
    )
