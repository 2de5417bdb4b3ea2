"""One bounded cache: at most ``size`` entries, the least recently used evicted first.

Thread safe (the service embeds on one thread and decides on another). :meth:`LRU.fetch`
computes the missing values in one call outside the lock, so a slow computation (an
embedding, a tripwire search) never holds up another thread; two threads that miss one key
may both compute it, and the later value is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``size`` values by key; reading or writing a key makes it the most recent."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"an LRU cache holds at least 1 entry, got size={size}")
        self.size = size
        self._kept: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (None: not kept)."""
        with self._lock:
            if key not in self._kept:
                return None
            self._kept.move_to_end(key)
            return self._kept[key]

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._keep(key, value)

    def fetch(self, keys: Sequence[K], compute: Callable[[list[K]], Sequence[V]]) -> list[V]:
        """The value of each of ``keys``, in order: those kept, and the others from one call
        of ``compute`` (the missing keys, each once, in order of first use), then kept."""
        with self._lock:
            found = {}
            for key in keys:
                if key in self._kept:
                    self._kept.move_to_end(key)
                    found[key] = self._kept[key]
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            made = dict(zip(missing, compute(missing), strict=True))
            with self._lock:
                for key, value in made.items():
                    self._keep(key, value)
            found |= made
        return [found[key] for key in keys]

    def _keep(self, key: K, value: V) -> None:
        self._kept[key] = value
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
