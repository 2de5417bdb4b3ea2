"""Framework adapters: put the Gate in front of a LangChain, LlamaIndex or Haystack RAG pipeline.

Each adapter is its own module and needs its framework, installed with an extra:

- ``ragbound.adapters.langchain``: :class:`GatedRetriever`, a LangChain ``BaseRetriever``
  that decides the query before retrieving (``pip install 'ragbound[langchain]'``);
- ``ragbound.adapters.langchain_store``: :class:`VectorStoreKnowledge` and
  :class:`GatedVectorStoreRetriever`, the guard on the user's own LangChain ``VectorStore``,
  one search per query (same extra);
- ``ragbound.adapters.langchain_agent``: :class:`GateMiddleware`, a LangChain v1 agent
  middleware that ends the turn on ``reject`` / ``abstain`` (same extra);
- ``ragbound.adapters.langchain_chat``: :class:`GatedChatRetriever` and
  :func:`gated_chat_chain`, the chat history beside the question (same extra);
- ``ragbound.adapters.llamaindex``: :class:`GatePostprocessor`, a LlamaIndex
  ``BaseNodePostprocessor`` (``pip install 'ragbound[llamaindex]'``);
- ``ragbound.adapters.llamaindex_retriever``: :class:`LlamaIndexKnowledge` and
  :class:`GatedLlamaIndexRetriever`, the guard on the user's own LlamaIndex retriever, one
  retrieval per query (same extra);
- ``ragbound.adapters.haystack``: :class:`GateComponent`, a Haystack component
  (``pip install 'ragbound[haystack]'``);
- ``ragbound.adapters.haystack_retriever``: :class:`HaystackKnowledge` and
  :class:`GatedHaystackRetriever`, the guard on the user's own Haystack embedding retriever,
  one search per query (same extra).

Every adapter decides a chat as ``POST /v1/decide`` with ``messages`` does: the middleware
reads the thread, the chat retriever its ``chat_history``, the LlamaIndex adapters a chat
engine's ``memory`` and the Haystack components a ``history`` input.

Importing this package imports no framework; importing an adapter module without its framework
raises an ``ImportError`` naming the extra to install.
"""
