"""TEST DOUBLE: a scripted OpenAI-compatible chat server that replies at once with a fixed text.

No user would run it. It stands in for the LLM server behind the gateway where the LLM is not
what is measured: in the fast tests (which read the request bodies it records, and tell it to
fail) and in ``make bench-serve``, which times the gateway's own overhead against it
(``app`` below; ``python -m uvicorn tests.support.instant_upstream:app``). The slow tests put
llama-cpp-python's real server behind the gateway instead.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

REPLY = "Scripted reply from the test double."


class ScriptedUpstream:
    """The double's state: requests received, and the status to answer with next (200 = the
    scripted completion; anything else = an OpenAI-style JSON error with that status)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.app = self._app()

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.received.append(body)
            self.headers.append(dict(request.headers))
            if self.status != 200:
                error = {"error": {"message": "scripted failure", "type": "invalid_request_error"}}
                return JSONResponse(error, status_code=self.status)
            if body.get("stream"):
                return StreamingResponse(_events(body), media_type="text/event-stream")
            return JSONResponse(_completion(body))

        return app


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1,
        "model": body.get("model") or "scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": REPLY},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
    }


async def _events(body: dict[str, Any]):
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1}
    base["model"] = body.get("model") or "scripted"
    words = REPLY.split(" ")
    for i, word in enumerate(words):
        delta = {"content": word if i == 0 else " " + word}
        if i == 0:
            delta["role"] = "assistant"
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield f"data: {json.dumps(last)}\n\n".encode()
    yield b"data: [DONE]\n\n"


app = ScriptedUpstream().app
"""The ASGI app for a child process (the benchmark's upstream)."""
