"""The HTTP side of an incoming webhook: one POST, and what Slack's answer means for
the alert. Slack answers `ok` (200), or a plain-text error code: `invalid_payload`
(400), `invalid_token` (403), `no_service` (404), `channel_is_archived` (410), 429
with `Retry-After` (seconds) when rate limited, and 5xx when it is down."""

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

import httpx

# Kept in the alert's last_error: Slack's answers are short codes; an HTML error page
# from a proxy is not worth storing whole.
_BODY_MAX = 2_000


class Verdict(StrEnum):
    SENT = "sent"
    RATE_LIMITED = "rate_limited"  # 429: again after Retry-After
    RETRY = "retry"  # 5xx, 408, connection errors: again after a backoff
    FAILED = "failed"  # any other answer: retrying would get the same


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    status: int | None
    detail: str
    retry_after_s: float | None = None


def webhook_key(url: str) -> str:
    """What the database keeps of a webhook: its URL is a secret."""
    return hashlib.sha256(url.encode()).hexdigest()


def classify(status: int, body: str, retry_after: str | None) -> Outcome:
    detail = body[:_BODY_MAX]
    if 200 <= status < 300:
        return Outcome(Verdict.SENT, status, detail)
    if status == 429:
        return Outcome(Verdict.RATE_LIMITED, status, detail, parse_retry_after(retry_after))
    if status == 408 or status >= 500:
        return Outcome(Verdict.RETRY, status, detail)
    return Outcome(Verdict.FAILED, status, detail)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds, or an HTTP date (RFC 9110); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max((moment - datetime.now(UTC)).total_seconds(), 0.0)


class SlackWebhook:
    """A connection to one webhook, reused across the messages of a delivery run."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        # Bounded everywhere (connect, read, write, pool): a hanging Slack delays the
        # alerts job by at most this much per message, and nothing else.
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False)

    def post(self, payload: dict[str, Any]) -> Outcome:
        try:
            response = self._client.post(self.url, json=payload)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # Connection refused, timeouts, a dropped connection (after a read timeout
            # Slack may have posted the message: see docs/alerts.md), or a malformed
            # URL, which the operator may fix before the attempts run out.
            return Outcome(Verdict.RETRY, None, f"{type(exc).__name__}: {exc}"[:_BODY_MAX])
        return classify(response.status_code, response.text, response.headers.get("retry-after"))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "SlackWebhook":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
