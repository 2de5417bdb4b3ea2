"""Knowledge: chunks + fine units + embedder + one backing (where the rows live).

:class:`KnowledgeBase` is made, added to, saved and loaded; :class:`Knowledge` is what checking
a query reads of any knowledge. docs/architecture.md maps the modules of this package.
"""

from ragbound.knowledge.backing import Backing, Capabilities, Contents, refuse_missing
from ragbound.knowledge.base import KnowledgeBase
from ragbound.knowledge.build import STAGE_BLOCK, StagedBuild, staging_dir
from ragbound.knowledge.layout import KB_FORMAT, LOCK_WHAT, MANIFEST, SEGMENTS, STAGING
from ragbound.knowledge.manifest import KBManifest, Segment, VectorDType, corpus_hash
from ragbound.knowledge.protocol import Knowledge
from ragbound.knowledge.registry import BACKINGS, backing_for, backing_of
from ragbound.knowledge.retriever import RetrieverKnowledge
from ragbound.knowledge.segments import FineUnits, check_index_target

__all__ = [
    "BACKINGS",
    "KB_FORMAT",
    "LOCK_WHAT",
    "MANIFEST",
    "SEGMENTS",
    "STAGE_BLOCK",
    "STAGING",
    "Backing",
    "Capabilities",
    "Contents",
    "FineUnits",
    "KBManifest",
    "Knowledge",
    "KnowledgeBase",
    "RetrieverKnowledge",
    "Segment",
    "StagedBuild",
    "VectorDType",
    "backing_for",
    "backing_of",
    "check_index_target",
    "corpus_hash",
    "refuse_missing",
    "staging_dir",
]
