"""The ``rewrite`` reading: an LLM turns a conversation's last user turn into one standalone
question, which the knowledge-boundary test then searches with.

Opt-in: it costs one LLM call per later turn (a first turn is read as itself, no call). Any
:class:`~ragbound.llm.LLM` works: the bundled local model, an OpenAI-compatible server
(``openai:MODEL``), or the gateway's upstream. The prompt is ``conversation-rewrite``
(``src/ragbound/llm/prompts``). Its p-values rest on the same assumption as the other
readings (:mod:`ragbound.conversations.reading`): the rewritten question of an in-knowledge
turn is no further from the knowledge than a standalone in-knowledge question.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragbound.conversations.model import Conversation
from ragbound.llm import LLM, GenerationParams, load_prompt

PROMPT_ID = "conversation-rewrite"
HISTORY_MESSAGES = 6
"""Messages before the last turn shown to the LLM (the most recent)."""
MAX_TOKENS = 96


class Rewriter:
    """Standalone questions from conversations through ``llm`` (greedy decoding)."""

    def __init__(self, llm: LLM, *, history_messages: int = HISTORY_MESSAGES):
        self.llm = llm
        self.history_messages = history_messages
        self.prompt = load_prompt(PROMPT_ID)
        self.params = GenerationParams(temperature=0.0, max_tokens=MAX_TOKENS, stop=["\n"])

    def rewrite(self, chat: Conversation) -> str:
        """The last user turn as a standalone question (itself for a first turn, or when the
        model answers nothing usable)."""
        if chat.turn_index == 0:
            return chat.last_user
        before = [m for m in chat.before if m.text and m.role in ("user", "assistant")]
        history = "\n".join(f"{m.role}: {m.text}" for m in before[-self.history_messages :])
        messages = self.prompt.render(history=history, last=chat.last_user)
        reply = self.llm.complete(messages, self.params).text
        return standalone(reply) or chat.last_user

    def rewrite_many(self, chats: Sequence[Conversation]) -> list[str]:
        """:meth:`rewrite` of each, in order."""
        return [self.rewrite(chat) for chat in chats]


def standalone(reply: str) -> str:
    """The question in a model's reply: its first non-blank line, without a leading label or
    surrounding quotes ("" when there is none)."""
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0]
    for label in ("Standalone question:", "Question:"):
        if line.lower().startswith(label.lower()):
            line = line[len(label) :].strip()
    return line.strip("\"'“”").strip()
