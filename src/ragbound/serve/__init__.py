"""``ragbound serve``: the gate as an HTTP service (FastAPI on uvicorn).

``create_app(gate, settings)`` builds the app; ``ragbound serve KB_DIR`` runs it. Needs the
``serve`` extra (``pip install 'ragbound[serve]'``).
"""

from __future__ import annotations

from ragbound.serve.app import create_app
from ragbound.serve.auth import Tokens
from ragbound.serve.gateway import GatewaySettings
from ragbound.serve.settings import Batching, Limits, ServeSettings

__all__ = ["Batching", "GatewaySettings", "Limits", "ServeSettings", "Tokens", "create_app"]
