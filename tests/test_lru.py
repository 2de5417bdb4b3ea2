"""The one bounded cache (ragbound.lru): least recently used out, missing values computed once."""

from __future__ import annotations

import threading

import pytest

from ragbound.lru import LRU


def test_the_least_recently_used_entry_goes_first() -> None:
    kept: LRU[str, int] = LRU(2)
    kept["a"], kept["b"] = 1, 2
    assert kept.get("a") == 1  # read: now the most recent
    kept["c"] = 3
    assert (kept.get("b"), kept.get("a"), kept.get("c"), len(kept)) == (None, 1, 3, 2)


def test_fetch_computes_the_missing_keys_once_in_one_call() -> None:
    calls: list[list[str]] = []

    def upper(keys: list[str]) -> list[str]:
        calls.append(keys)
        return [k.upper() for k in keys]

    kept: LRU[str, str] = LRU(8)
    assert kept.fetch(["a", "b", "a"], upper) == ["A", "B", "A"]
    assert kept.fetch(["b", "c", "c", "a"], upper) == ["B", "C", "C", "A"]
    assert kept.fetch([], upper) == []
    assert calls == [["a", "b"], ["c"]]


def test_fetch_answers_every_key_even_past_the_size() -> None:
    kept: LRU[int, int] = LRU(2)
    kept[0] = 0
    assert kept.fetch([0, 1, 2, 3], lambda keys: [k * 10 for k in keys]) == [0, 10, 20, 30]
    assert len(kept) == 2 and kept.get(3) == 30 and kept.get(0) is None


def test_fetch_touches_the_kept_keys_before_it_adds_the_new_ones() -> None:
    kept: LRU[str, int] = LRU(2)
    kept["old"], kept["used"] = 0, 1
    kept.fetch(["used", "new"], lambda keys: [2] * len(keys))
    assert kept.get("old") is None and kept.get("used") == 1


def test_threads_sharing_one_cache_get_their_own_values_and_keep_its_size() -> None:
    kept: LRU[int, int] = LRU(50)
    wrong: list[tuple[list[int], list[int]]] = []

    def work(offset: int) -> None:
        for start in range(0, 400, 7):
            keys = [(offset + start + j) % 120 for j in range(9)]
            got = kept.fetch(keys, lambda missing: [k + 1 for k in missing])
            if got != [k + 1 for k in keys]:
                wrong.append((keys, got))

    threads = [threading.Thread(target=work, args=(i * 13,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == [] and len(kept) == 50


def test_a_cache_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LRU(0)
