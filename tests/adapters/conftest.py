"""What the framework adapter tests share: the MiniLM folder loaded, and a calibrated copy with
tripwires."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ragbound.tripwires import TripwireRule
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE, write_tripwire_file

if TYPE_CHECKING:
    from ragbound.knowledge import KnowledgeBase

# Haystack posts usage events from Pipeline.run unless told not to (read when it is imported)
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

# the rule of tests/test_gate.py: a tripwire ranked first in the merged top 3 rejects
RULE = TripwireRule(k=3, proportion=None, rank=1)
ANSWERED = MORE_IN_KNOWLEDGE[12]  # in knowledge, no tripwire near
ABSTAINED = OUT_OF_KNOWLEDGE[0]  # out of knowledge
REJECTED = UNSAFE[0]  # a harm tripwire ranks first


@pytest.fixture(scope="session")
def gated_kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bees-and-trains knowledge base, calibrated at alpha = 0.1, with four tripwires."""
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase
    from ragbound.tripwires import LiveTripwires, read_tripwires

    target = tmp_path_factory.mktemp("adapters") / "kb"
    shutil.copytree(minilm_kb_dir, target)
    kb = KnowledgeBase.load(target)
    Guard.calibrate(kb, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10], k=4, alpha=0.1).save()
    source = target.parent / "tripwires.jsonl"
    write_tripwire_file(source)
    LiveTripwires.open(kb).add(read_tripwires(source))
    return target


@pytest.fixture(scope="module")
def kb(minilm_kb_dir: Path) -> KnowledgeBase:
    """The bees-and-trains MiniLM folder, loaded (the framework-native tests compare to it)."""
    from ragbound.knowledge import KnowledgeBase

    return KnowledgeBase.load(minilm_kb_dir)


@pytest.fixture(scope="session")
def sample_chat_kb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample corpus (a product's documentation) indexed with MiniLM, calibrated on
    its in-knowledge questions, with its ten tripwires: what the README's tour leaves behind,
    and what the chat tests talk to."""
    from ragbound import Guard, KnowledgeBase
    from ragbound.demo import sample_corpus
    from ragbound.tripwires import LiveTripwires, read_tripwires

    root = sample_corpus()
    target = tmp_path_factory.mktemp("chats") / "kb"
    KnowledgeBase.build([root / "docs"], embedder="minilm").save(target)
    questions = (root / "in_knowledge.txt").read_text(encoding="utf-8").splitlines()
    Guard.calibrate(KnowledgeBase.load(target), questions).save()
    LiveTripwires.open(KnowledgeBase.load(target)).add(read_tripwires(root / "tripwires.jsonl"))
    return target
