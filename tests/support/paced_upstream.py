"""TEST DOUBLE: an OpenAI-compatible chat server whose streamed reply is paced or large.

It stands in for the LLM behind the gateway where what is tested is the gateway's own
connection to its caller (a slow consumer of a long stream, a client that reads nothing):
``model`` ``"paced"`` streams ``EVENTS`` words ``PACE_S`` apart (longer in all than the
short timeouts the tests set), ``"large"`` streams ``LARGE_EVENTS`` chunks of
``LARGE_CHARS`` characters as fast as it can (more than the socket buffers hold).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

EVENTS = 12
PACE_S = 0.25
LARGE_EVENTS = 400
LARGE_CHARS = 16_000


def paced_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        return StreamingResponse(_events(body.get("model")), media_type="text/event-stream")

    return app


async def _events(model: str | None):
    base: dict[str, Any] = {"id": "chatcmpl-paced", "object": "chat.completion.chunk"}
    base |= {"created": 1, "model": model or "paced"}
    large = model == "large"
    for i in range(LARGE_EVENTS if large else EVENTS):
        text = "x" * LARGE_CHARS if large else f"word{i} "
        delta = {"role": "assistant", "content": text} if i == 0 else {"content": text}
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        if not large:
            await asyncio.sleep(PACE_S)
    last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield f"data: {json.dumps(last)}\n\n".encode()
    yield b"data: [DONE]\n\n"
