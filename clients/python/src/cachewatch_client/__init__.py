"""cachewatch's client: every OpenAI and Anthropic call's prefix-cache usage, sent to
cachewatch without slowing the application.

    import anthropic, cachewatch_client

    client = cachewatch_client.instrument(anthropic.Anthropic(), service="support-bot")
    with cachewatch_client.session("conv-42", tenant="acme"):
        client.messages.create(...)        # recorded: usage, TTFT, fingerprint

- `instrument(client, service=..., deploy=..., url=..., token=...)` (module
  `instrument`): `openai.OpenAI`/`AsyncOpenAI` (Chat Completions and Responses)
  and `anthropic.Anthropic`/`AsyncAnthropic` (Messages), streamed or not.
- `record(request, response, started=..., first_token=...)`: a call made some
  other way.
- `session(...)` (module `context`): labels for every call in a block.
- `configure(...)`, `flush()`, `stats()`: the process's default shipper (module
  `shipper`: the queue, the thread, the retries and what is counted).
- `cachewatch_client.fingerprint`: the prefix fingerprints themselves (standard
  library only), which cachewatch's own ingestion uses too.

Settings come from the arguments, else `CACHEWATCH_URL`, `CACHEWATCH_TOKEN`,
`CACHEWATCH_SERVICE`, `CACHEWATCH_DEPLOY` (module `config`).
"""

from __future__ import annotations

from ._version import __version__
from .config import Settings
from .context import Labels, session
from .instrument import instrument, record
from .shipper import Shipper, ShipperStats, configure, default_shipper

__all__ = [
    "Labels",
    "Settings",
    "Shipper",
    "ShipperStats",
    "__version__",
    "configure",
    "flush",
    "instrument",
    "record",
    "session",
    "stats",
]


def flush(timeout: float | None = None) -> bool:
    """Wait until the default shipper has sent every call made so far."""
    return default_shipper().flush(timeout)


def stats() -> ShipperStats:
    """The default shipper's counts (module `shipper`)."""
    return default_shipper().stats()
