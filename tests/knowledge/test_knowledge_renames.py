"""The names the manifest's backing entry had before (``*Record``) and the tripwire flag's old
module still work for one release, each with a DeprecationWarning; the new names are what the
modules define."""

from __future__ import annotations

import importlib
import sys

import pytest

RENAMED = [
    ("ragbound.knowledge.manifest", "BackingRecord", "BackingEntry"),
    ("ragbound.knowledge.chroma", "ChromaRecord", "ChromaEntry"),
    ("ragbound.knowledge.qdrant", "QdrantRecord", "QdrantEntry"),
    ("ragbound.knowledge.postgres", "PostgresRecord", "PostgresEntry"),
]


@pytest.mark.parametrize(("module", "old", "new"), RENAMED)
def test_an_old_entry_name_warns_and_is_the_new_class(module: str, old: str, new: str):
    loaded = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        assert getattr(loaded, old) is getattr(loaded, new)
    assert old not in vars(loaded)


def test_the_old_tripwire_flag_module_warns_and_reads_the_new_one():
    from ragbound.knowledge import tripwire_flags

    sys.modules.pop("ragbound.knowledge.tripwire_records", None)
    with pytest.warns(DeprecationWarning, match="use ragbound.knowledge.tripwire_flags"):
        old = importlib.import_module("ragbound.knowledge.tripwire_records")
    assert old.is_tripwire is tripwire_flags.is_tripwire
    assert old.TRIPWIRE_FLAG == tripwire_flags.TRIPWIRE_FLAG == "ragbound_tripwire"
