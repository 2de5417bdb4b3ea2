"""``ragbound._lazy``: lazy re-exports and the old names a rename keeps for one release."""

from __future__ import annotations

import types
import warnings

import pytest

from ragbound._lazy import deprecated_aliases, deprecation_note, lazy_attributes


def test_an_old_name_warns_and_returns_the_new_object() -> None:
    module = types.ModuleType("pkg.mod")
    module.New = object()
    module.__getattr__ = deprecated_aliases("pkg.mod", {"Old": "New"}, vars(module))
    with pytest.warns(DeprecationWarning, match=r"^pkg\.mod\.Old is deprecated, use New; removed"):
        assert module.Old is module.New
    with pytest.warns(DeprecationWarning):  # every read warns: the old name is not cached
        assert module.Old is module.New
    assert "Old" not in vars(module)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        module.Nothing  # noqa: B018


def test_an_old_name_of_a_lazy_package_imports_the_new_one_on_first_use() -> None:
    namespace: dict = {}
    getattr_, dir_ = lazy_attributes(
        "pkg", {"dumps": "json"}, namespace, deprecated={"old_dumps": "dumps"}
    )
    with pytest.warns(DeprecationWarning, match="pkg.old_dumps is deprecated, use dumps"):
        function = getattr_("old_dumps")
    assert function("x") == '"x"' and namespace == {"dumps": function}
    assert dir_() == ["dumps"]  # the new names only


def test_a_new_name_does_not_warn() -> None:
    namespace = {"New": 1}
    getattr_ = deprecated_aliases("m", {"Old": "New"}, namespace)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert namespace["New"] == 1
    with pytest.raises(AttributeError):
        getattr_("New")  # present names never reach __getattr__; absent ones are errors


def test_one_wording_for_every_deprecation() -> None:
    assert deprecation_note("a", "b") == "a is deprecated, use b; removed in the next release"
