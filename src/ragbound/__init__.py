"""ragbound: know what your RAG system does not know.

Calibrated out-of-knowledge p-values for single queries (a goodness-of-fit test on retrieval
similarities), shift tests for query streams, tripwire rejection and abstention benchmarks.

Importing the package does no I/O and loads no model; heavy dependencies load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"
