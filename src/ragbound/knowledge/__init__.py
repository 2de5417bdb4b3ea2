"""Knowledge: chunks + fine units + embedder + one backing (where the rows live).

- :mod:`~ragbound.knowledge.layout`: the names inside a knowledge-base folder (imports nothing)
- :mod:`~ragbound.knowledge.manifest`: the manifest, its segments and its ``backing`` field
- :mod:`~ragbound.knowledge.backing`: the :class:`Backing` protocol, :class:`Capabilities`
  and :class:`Contents` (what a backing reads of a knowledge base)
- :mod:`~ragbound.knowledge.local`, :mod:`~ragbound.knowledge.hnsw`,
  :mod:`~ragbound.knowledge.postgres`, :mod:`~ragbound.knowledge.chroma`,
  :mod:`~ragbound.knowledge.qdrant`, :mod:`~ragbound.knowledge.lancedb`: the backings (none
  imports the knowledge base); :mod:`~ragbound.knowledge.registry` lists them by dotted path,
  imports one on first use and chooses one by name or URL
- :mod:`~ragbound.knowledge.segments`: segment files and the folder's care
- :mod:`~ragbound.knowledge.build`: the backing checked first, chunking, a segment's embedding
  and the resumable staged build
- :mod:`~ragbound.knowledge.appending`: what a knowledge base holds as segments are appended,
  rebased on another writer's commit, or restricted to some documents
- :mod:`~ragbound.knowledge.commits`: reading the last commit, knowing when a writer is behind
- :mod:`~ragbound.knowledge.views`: searching at other granularities
- :mod:`~ragbound.knowledge.query`: query preparation (validate once; vectors or texts)
- :mod:`~ragbound.knowledge.protocol`: :class:`Knowledge`, what checking a query reads;
  :mod:`~ragbound.knowledge.retriever`: :class:`RetrieverKnowledge`, any retriever as Knowledge
- :mod:`~ragbound.knowledge.held`: :class:`~ragbound.knowledge.held.HeldKnowledge`, rows
  held in a backing and searched; :mod:`~ragbound.knowledge.base`: :class:`KnowledgeBase`,
  held knowledge that is made, added to, saved and loaded
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
