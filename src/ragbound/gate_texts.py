"""What an application says instead of answering, and how it hands the chunks to its LLM.

One wording for the Gate, the gateway and the adapters; plain strings, so the CLI's
``serve --help`` shows them without loading the Gate (numpy, pydantic). An abstention has
one text per cause: out of knowledge (the question is off the corpus) and unanswerable (on
it, but the retrieved chunks do not hold the answer).
"""

from __future__ import annotations

DEFAULT_REFUSAL = "I can't help with that request."
DEFAULT_ABSTENTION = "I don't know: the question is outside what my documents cover."
DEFAULT_UNANSWERABLE = "I don't know: my documents do not hold the answer to that."
DEFAULT_CONTEXT_TEMPLATE = "Answer from these passages of the knowledge base:\n\n{context}"
