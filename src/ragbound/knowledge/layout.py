"""The names inside a knowledge-base folder, declared once.

Every module that reads or writes a knowledge-base folder (the knowledge base itself, its
calibration, its tripwires, its HNSW graph) takes the names from here, so no module needs
another one's code to know what the folder holds. Imports nothing from the package::

    manifest.json              the knowledge base's manifest; replacing it commits a write
    segments/                  chunk, vector and unit files of each segment (local backings)
    staging/                   a build's finished blocks of vectors, until it commits
    hnsw/                      the HNSW graph (the hnsw backing)
    calibration/               the calibration (its own manifest.json and arrays)
    tripwires.json, tripwires/ the tripwires' manifest and generations
    tripwire-rule.json         the tripwire rule saved by ``ragbound tripwire tune``
"""

from __future__ import annotations

KB_FORMAT = "ragbound.kb/1"
MANIFEST = "manifest.json"
SEGMENTS = "segments"
STAGING = "staging"
GRAPH_DIR = "hnsw"
CALIBRATION_DIR = "calibration"
TRIPWIRE_MANIFEST = "tripwires.json"
TRIPWIRE_DIR = "tripwires"
RULE_FILE = "tripwire-rule.json"

CHUNKS_SUFFIX = ".chunks.jsonl"
VECTORS_SUFFIX = ".vectors.npy"
UNITS_SUFFIX = ".units.jsonl"
UNIT_VECTORS_SUFFIX = ".units.npy"
GRAPH_SUFFIX = ".graph.npy"

# what the writer lock is called in messages; the calibration and the tripwires take it too
LOCK_WHAT = "knowledge base"

# what ragbound writes at the top of a knowledge-base folder (anything else is the user's)
WRITTEN_BY_RAGBOUND = frozenset(
    {
        MANIFEST,
        SEGMENTS,
        STAGING,
        GRAPH_DIR,
        CALIBRATION_DIR,
        TRIPWIRE_MANIFEST,
        TRIPWIRE_DIR,
        RULE_FILE,
    }
)


def is_temporary(name: str) -> bool:
    """An atomic write's temporary file (``.<name>.<random>.tmp``) that a crash left."""
    return name.startswith(".") and name.endswith(".tmp")
