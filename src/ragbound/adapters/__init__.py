"""Framework adapters: the Gate in front of a LangChain, LlamaIndex or Haystack RAG pipeline.

Each adapter module needs its framework, installed with an extra (``ragbound[langchain]``,
``ragbound[llamaindex]``, ``ragbound[haystack]``); importing one without it raises an
ImportError naming the extra. Importing this package imports no framework. docs/frameworks.md
describes every adapter.
"""
