"""The lab's two kinds of traffic: the assistant's sessions, and the digest batch's
fan-outs. Both stop issuing at a deadline and return once their requests are done.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from typing import Any, Final

from service.lab.assistant import new_session, pasted_text
from service.lab.client import MODEL, Lab
from service.lab.phases import ASSISTANT, FANOUT, Phase

ANSWER_TOKENS: Final = 16
DIGEST_SYSTEM: Final = (
    "You write the weekly operations digest of Northwind Logistics. Summarize the "
    "document below in one sentence for the team named in the request."
)


async def sessions(
    lab: Lab, phase: Phase, deadline: float, workers: int, turns: int, counter: itertools.count
) -> None:
    """`workers` users, each running one session after another until `deadline`."""

    async def user() -> None:
        while time.time() < deadline:
            session = new_session(lab.seed, next(counter), turns)
            while not session.done and time.time() < deadline:
                body = session.body(MODEL, phase.release, ANSWER_TOKENS)
                labels = {
                    "deploy": phase.release,
                    "session_id": session.session_id,
                    "attributes": {"lab_phase": phase.key},
                }
                answer = await lab.ask(body, service=ASSISTANT, labels=labels)
                session.append(body, answer.text)

    await asyncio.gather(*(user() for _ in range(workers)))


def digest_body(batch: int, seed: int) -> dict[str, Any]:
    """A new shared start per batch: a document no earlier request carried."""
    rng = random.Random(f"digest:{seed}:{batch}")
    document = "\n".join(pasted_text(rng, 12) for _ in range(2))
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": DIGEST_SYSTEM},
            {"role": "user", "content": f"Document {batch}:\n{document}\n\nTeam: operations."},
        ],
        "max_tokens": 8,
    }


async def fanouts(
    lab: Lab, phase: Phase, deadline: float, size: int, batches: itertools.count
) -> None:
    """Batches of `size` identical requests on a new start until `deadline`: all at
    once (`cold`), or one first and the rest once it answered (`warm`)."""
    labels = {"scenario": "weekly-digest", "attributes": {"lab_phase": phase.key}}
    while time.time() < deadline:
        body = digest_body(next(batches), lab.seed)
        rest = size
        if phase.fanout == "warm":
            await lab.ask(body, service=FANOUT, labels=labels)
            rest -= 1
        await asyncio.gather(*(lab.ask(body, service=FANOUT, labels=labels) for _ in range(rest)))
