"""``ragbound._lazy``: names re-exported from a submodule, imported on first use."""

from __future__ import annotations

import pytest

from ragbound._lazy import lazy_attributes


def test_a_lazy_name_is_imported_on_first_use_and_kept() -> None:
    namespace: dict = {"here": 1}
    getattr_, dir_ = lazy_attributes("pkg", {"dumps": "json"}, namespace)
    assert "dumps" not in namespace and dir_() == ["dumps", "here"]
    function = getattr_("dumps")
    assert function("x") == '"x"' and namespace["dumps"] is function


def test_an_unknown_name_is_an_attribute_error() -> None:
    getattr_, _ = lazy_attributes("pkg", {"dumps": "json"}, {})
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'loads'"):
        getattr_("loads")
