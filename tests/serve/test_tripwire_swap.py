"""A large ``POST /v1/tripwires`` does not hold up decisions: the new set is embedded and
built off the decision path, then swapped in whole (a real service on loopback, MiniLM)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from ragbound.gate import Gate
from ragbound.serve import Limits, ServeSettings, Tokens, create_app
from tests.serve.server import ADMIN, READ, ThreadServer, auth, served_kb, wait_ready
from tests.texts import IN_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES, UNSAFE

FILLER = 3_000  # short tripwires: embedding them takes a while on any machine
LIMITS = Limits(max_body_bytes=2_000_000, request_timeout_s=600)


@pytest.fixture
def url(minilm_kb_dir: Path, tmp_path: Path):
    gate = Gate.load(served_kb(minilm_kb_dir, tmp_path / "kb"))
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])
    with ThreadServer(create_app(gate, ServeSettings(tokens=tokens, limits=LIMITS))) as url:
        wait_ready(url)
        yield url


def many_tripwires() -> list[dict[str, str]]:
    """The bees-and-trains tripwires and FILLER short ones about warehouse stock."""
    filler = [
        {
            "text": f"Where is crate {n} of tinned peaches stored on shelf {n % 97}?",
            "topic": "stock",
        }
        for n in range(FILLER)
    ]
    return [*TRIPWIRES, *filler]


async def checks_during_add(url: str) -> tuple[int, httpx.Response]:
    """Start one large tripwire add, ask /v1/decide one query after another until it is
    answered, and count the decisions answered before it."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        add = asyncio.create_task(
            client.post("/v1/tripwires", json={"tripwires": many_tripwires()}, headers=auth(ADMIN))
        )
        answered = 0
        while not add.done():
            response = await client.post(
                "/v1/decide", json={"query": IN_KNOWLEDGE[answered % 5]}, headers=auth(READ)
            )
            assert response.status_code == 200, response.text
            answered += not add.done()
        return answered, await add


def test_decisions_are_answered_while_a_large_tripwire_add_is_built(url: str) -> None:
    answered, added = asyncio.run(checks_during_add(url))
    assert added.status_code == 200, added.text
    assert added.json()["change"]["n_after"] == len(TRIPWIRES) + FILLER
    assert answered >= 3  # answered before the add was: decisions did not wait for it
    after = httpx.post(
        f"{url}/v1/decide", json={"query": UNSAFE[1]}, headers=auth(READ), timeout=60
    ).json()
    assert after["action"] == "reject" and after["tripwire_set"] == added.json()["tripwire_set"]
    assert {t["topic"] for t in after["tripwires"]["triggers"]} == {"sabotage"}
