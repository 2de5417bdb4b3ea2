"""``attach_options``: the options given for a store URL, checked against what its backing
takes, before anything connects."""

from __future__ import annotations

import pytest

from ragbound.errors import InputError
from ragbound.knowledge.registry import attach_options

POSTGRES = "postgresql://u@127.0.0.1:1/db"


def test_the_options_given_are_kept_and_those_not_given_dropped() -> None:
    options = attach_options(POSTGRES, table="docs", text_column=None, where=["a=b"], sample=8)
    assert options == {"table": "docs", "where": ["a=b"], "sample": 8}


def test_an_option_the_store_does_not_take_is_named_as_a_flag() -> None:
    with pytest.raises(InputError, match=r"^--table, --vector-name: not an option of chroma "):
        attach_options("chroma://127.0.0.1:1/docs", table="t", vector_name="v", doc_field="d")


def test_a_required_option_missing_is_named_as_a_flag() -> None:
    with pytest.raises(InputError, match=r"^attaching a postgresql store needs --table$"):
        attach_options(POSTGRES, text_column="c", table=None)


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(InputError, match="not a store ragbound attaches to"):
        attach_options("mysql://u@h/db", table="t")
