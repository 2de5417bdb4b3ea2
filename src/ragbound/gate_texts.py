"""What an application says instead of answering, and how it hands the chunks to its LLM.

One wording for the Gate, the gateway and the adapters; plain strings, so the CLI's
``serve --help`` shows them without loading the Gate (numpy, pydantic).
"""

from __future__ import annotations

DEFAULT_REFUSAL = "I can't help with that request."
DEFAULT_ABSTENTION = "I don't know: the question is outside what my documents cover."
DEFAULT_CONTEXT_TEMPLATE = "Answer from these passages of the knowledge base:\n\n{context}"
