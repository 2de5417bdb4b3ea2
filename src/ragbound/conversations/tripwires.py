"""The tripwires across a conversation's turns: which earlier user turns are forbidden, and the
verdict of each conversation with its other turns met too.

The policy (docs/tripwires.md): a forbidden turn is refused at its own turn, then left out of
what is read and of what goes upstream (``conversation.dropped``), and every later turn is
decided on its merits: one false hit costs its own turn alone. The turns are embedded through
the gate's cache of embedded turns and their verdicts kept per text and tripwire set, so a
chat's history is embedded and searched once, not once a turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragbound.conversations.model import Conversation, Message, Query
from ragbound.conversations.reading import Read, recent_text
from ragbound.conversations.turns import Embedded, TurnVectors
from ragbound.lru import LRU
from ragbound.tripwires.guard import TripwireTest, TripwireVerdict


class TurnTripwires:
    """``tripwires`` met by every user turn of a chat, the turns embedded through ``vectors``
    (the gate's cache); ``instructions``: the system and developer messages meet them too.
    The verdicts of the most recently met :attr:`TurnVectors.size` turns are kept."""

    def __init__(self, tripwires: TripwireTest, vectors: TurnVectors, *, instructions: bool):
        self.tripwires = tripwires
        self.vectors = vectors
        self.instructions = instructions
        self._verdicts: LRU[tuple[str, str], TripwireVerdict] = LRU(vectors.size)

    def dropped(self, items: Sequence[Query]) -> list[tuple[int, ...]]:
        """Per item, the earlier user turns found forbidden: each turn alone, or the recent
        turns kept before it joined with it (a request split over turns); a turn found
        forbidden is dropped, so the joins after it leave it out. Checked in one batch as if
        nothing were dropped, then again from the first turn dropped."""
        dropped: list[tuple[int, ...]] = [()] * len(items)
        chats = [
            (i, item.user_turns[:-1])
            for i, item in enumerate(items)
            if isinstance(item, Conversation) and item.turn_index > 0
        ]
        first = [t for _, turns in chats for t in _optimistic(turns)]
        found = {t: v.forbidden for t, v in zip(first, self.verdicts(first), strict=True)}
        for i, turns in chats:
            dropped[i] = self._walk(turns, found)
        return dropped

    def _walk(self, turns: Sequence[str], found: dict[str, bool]) -> tuple[int, ...]:
        """The turns found forbidden, walking ``turns`` in order (``found``: verdicts known,
        by text; others are searched as met)."""
        kept: list[str] = []
        dropped: list[int] = []
        for j, turn in enumerate(turns):
            texts = [turn, joined_turns([*kept, turn])] if kept else [turn]
            unknown = [t for t in texts if t not in found]
            if unknown:
                verdicts = self.verdicts(unknown)
                found.update((t, v.forbidden) for t, v in zip(unknown, verdicts, strict=True))
            if any(found[t] for t in texts):
                dropped.append(j)
            else:
                kept.append(turn)
        return tuple(dropped)

    def across(self, embedded: Embedded, verdicts: list[TripwireVerdict]) -> list[TripwireVerdict]:
        """Each item's verdict, the other user turns of a conversation (and its instructions,
        if asked) met too: the first of them found forbidden replaces a verdict that was not."""
        owners: list[int] = []
        others: list[str] = []
        for i, (item, how) in enumerate(zip(embedded.items, embedded.reads, strict=True)):
            if not isinstance(item, Conversation):
                continue
            read = item.without_turns(embedded.dropped_at(i))
            for text in other_turns(read, how, instructions=self.instructions):
                owners.append(i)
                others.append(text)
        found = list(verdicts)
        for owner, verdict in zip(owners, self.verdicts(others), strict=True):
            if verdict.forbidden and not found[owner].forbidden:
                found[owner] = verdict
        return found

    def verdicts(self, texts: list[str]) -> list[TripwireVerdict]:
        """The tripwire verdict of each turn, kept per text and tripwire set: a chat sends its
        history at every turn, and its turns are searched once, not once a turn."""
        set_hash = self.tripwires.set_hash
        return self._verdicts.fetch([(t, set_hash) for t in texts], self._search)

    def _search(self, keys: list[tuple[str, str]]) -> list[TripwireVerdict]:
        texts = [text for text, _ in keys]
        return self.tripwires.check_vectors(texts, self.vectors(texts))


def _optimistic(turns: Sequence[str]) -> list[str]:
    """Each earlier turn alone and joined with the turns before it, as if none were dropped:
    what :meth:`TurnTripwires.dropped` checks in one batch (the common case drops nothing)."""
    return [t for j, turn in enumerate(turns) for t in (turn, joined_turns(turns[: j + 1]))]


def other_turns(chat: Conversation, how: Read, *, instructions: bool) -> list[str]:
    """The texts the tripwires see besides the read text: the decided turn alone, the recent
    turns joined (a request split over turns) and, with ``instructions``, the system and
    developer messages. ``chat`` is the conversation as read, its forbidden turns dropped (the
    earlier turns it keeps were found not forbidden at their own turn)."""
    extra = list(chat.instructions) if instructions else []
    joined = [recent_text(chat)[0]] if chat.turn_index > 0 else []
    return [t for t in dict.fromkeys([chat.last_user, *joined, *extra]) if t != how.text]


def joined_turns(turns: Sequence[str]) -> str:
    """The recent ``turns`` joined as :func:`recent_text` joins them: how the tripwires read a
    request split over turns."""
    return recent_text(Conversation(tuple(Message("user", t) for t in turns)))[0]
