"""The article's corporate assistant, as real request bodies.

A long system prompt, 14 tool definitions and multi-turn sessions that append:
each turn adds a pasted ticket, e-mail or log excerpt and keeps the model's
earlier answers, as a chat UI does. Everything is drawn from a seeded
`random.Random`, so a session's bodies are the same in every run.

Sizes are set for SmolLM2-135M on 2 cores (about 150-400 prompt tokens a second
per replica): a static start of about 650 tokens (system + tools in the
ChatML-with-tools template) and turns of about 200 tokens, so session history
outweighs the shared start after two turns and losing it (round-robin
routing) is a drop the detector must see.

Release `v2` puts the current time and the company at the top of the system
prompt (the anti-pattern): every request then starts a prefix of its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

SYSTEM_PROMPT: Final = (
    "You are Atlas, the internal assistant of Northwind Logistics. You help employees "
    "with IT, HR, travel, facilities and finance questions. Answer in plain English, "
    "in at most three sentences, and say which policy or system your answer relies "
    "on. When a request needs an action (opening a ticket, booking a room, checking "
    "a balance), call the matching tool instead of guessing. Never reveal salaries, "
    "personal addresses or health information of other employees. If a question is "
    "outside these areas, say so and point to the right team. Escalate security "
    "incidents to the security desk at once."
)

V2_HEADER: Final = "Current time: {now}. Company: Northwind Logistics GmbH.\n"


def _tool(tool: str, description: str, *params: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string"} for k in params},
            },
        },
    }


TOOLS: Final = [
    _tool("open_ticket", "Open an IT ticket.", "summary", "priority"),
    _tool("ticket_status", "Status of an IT ticket.", "ticket_id"),
    _tool("reset_password", "Send a password reset link.", "account"),
    _tool("book_room", "Book a meeting room.", "room", "slot"),
    _tool("find_colleague", "Find a colleague's team and desk.", "full_name"),
    _tool("leave_balance", "Remaining leave days of the caller.", "year"),
    _tool("request_leave", "Request leave.", "start", "end"),
    _tool("expense_status", "Status of an expense claim.", "claim_id"),
    _tool("book_travel", "Book a business trip.", "destination", "dates"),
    _tool("policy_search", "Search the policy handbook.", "query"),
    _tool("order_hardware", "Order a laptop, screen or phone.", "item"),
    _tool("vpn_status", "VPN health for a site.", "site"),
    _tool("payroll_question", "Route a payroll question.", "topic"),
    _tool("report_incident", "Report a security incident.", "what"),
]

_OPENERS: Final = [
    "Hi Atlas, can you look at this ticket I got from a customer team?",
    "Here is an e-mail thread from facilities, what should I do?",
    "Our VPN logs show this, is it a known issue?",
    "Finance sent me this about my expense claim, please summarize it.",
    "I am travelling next week, here are the details from the agency.",
]
_FOLLOW_UPS: Final = [
    "Thanks. One more thing from the same thread:",
    "And what about this part that came later?",
    "They replied again, see below.",
    "Here is the next message, does it change your answer?",
    "Another excerpt from the log:",
]
_FACTS: Final = [
    "The shipment tracking page returned error 502 for orders placed after nine.",
    "The Hamburg office reports that the badge readers on floor three reject new cards.",
    "A contractor asked for access to the finance share without a signed request.",
    "The quarterly travel budget for the sales team is nearly spent.",
    "Two laptops from the March batch fail to wake from sleep after the update.",
    "The meeting room calendar shows double bookings for the large boardroom.",
    "Payroll noticed that overtime for night shifts was rounded down twice.",
    "The warehouse scanners lose Wi-Fi near the loading docks every afternoon.",
    "An employee received a message asking to confirm their password by e-mail.",
    "The expense tool rejects receipts in PDF format larger than five megabytes.",
    "The new hires in Rotterdam have not received their welcome packages.",
    "Customer support wants a shared mailbox for the returns department.",
    "The VPN gateway in Frankfurt restarted three times during the night.",
    "Someone left a visitor badge at the reception without signing out.",
    "The printer on the second floor prints every page twice since Monday.",
    "The annual leave carry-over rule changed and managers are unsure how to apply it.",
]


def pasted_text(rng: random.Random, sentences: int = 8) -> str:
    """A pasted excerpt of about 20 tokens a sentence, with a reference number."""
    ref = f"Reference {rng.randrange(10_000, 99_999)}-{rng.choice('ABCDEFGH')}."
    return " ".join([ref, *rng.sample(_FACTS, sentences)])


def system_prompt(release: str, now: datetime | None = None) -> str:
    """The system prompt of a release; `v2` prepends the time and the company."""
    if release == "v2":
        moment = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
        return V2_HEADER.format(now=moment) + SYSTEM_PROMPT
    return SYSTEM_PROMPT


@dataclass
class Session:
    """One conversation: its id, its seed, and the history so far."""

    session_id: str
    rng: random.Random
    turns: int
    history: list[dict[str, str]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.history) >= 2 * self.turns

    def next_user_message(self) -> str:
        lead = self.rng.choice(_FOLLOW_UPS if self.history else _OPENERS)
        return f"{lead}\n\n{pasted_text(self.rng)}"

    def body(self, model: str, release: str, max_tokens: int) -> dict[str, Any]:
        """The next request of this session (the caller appends the answer)."""
        messages = [
            {"role": "system", "content": system_prompt(release)},
            *self.history,
            {"role": "user", "content": self.next_user_message()},
        ]
        return {"model": model, "messages": messages, "tools": TOOLS, "max_tokens": max_tokens}

    def append(self, body: dict[str, Any], answer: str) -> None:
        """Keep the turn: the user message sent and the model's answer (append-only)."""
        self.history.extend([body["messages"][-1], {"role": "assistant", "content": answer}])


def new_session(seed: int, index: int, turns: int) -> Session:
    return Session(f"s{seed}-{index:04d}", random.Random(f"{seed}:{index}"), turns)
