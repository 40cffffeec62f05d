"""The price source: genai-prices' bundled prices for a few known models, tiers at
their base, unknown models unpriced, and no network."""

import subprocess
import sys

import pytest

from service.profiles.prices import Quote, quote
from tests.conftest import PROJECT_ROOT


@pytest.mark.parametrize(
    ("model", "provider", "expected"),
    [
        # Anthropic's long-context tier (above 200,000 tokens) is not taken.
        ("claude-sonnet-4-5", "anthropic", Quote(3.0, 0.3, 3.75, 6.0)),
        ("claude-3-5-haiku-20241022", "anthropic", Quote(0.8, 0.08, 1.0, 1.6)),
        ("gpt-4o", "openai", Quote(2.5, 1.25, None, None)),
        ("gpt-4o-2024-08-06", "OpenAI", Quote(2.5, 1.25, None, None)),
        ("gemini-2.5-flash", "google", Quote(0.3, 0.03, None, None)),
        ("gemini-2.5-pro", "google", Quote(1.25, 0.125, None, None)),
        # The standard price, not the off-peak one, whenever the process started.
        ("deepseek-chat", "deepseek", Quote(0.27, 0.07, None, None)),
        # Our `bedrock` is its `aws`.
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", "bedrock", Quote(3.0, 0.3, 3.75, None)),
    ],
)
def test_known_models_have_their_prices(model: str, provider: str, expected: Quote) -> None:
    assert quote(model, provider) == expected


def test_unknown_models_and_providers_have_no_price() -> None:
    assert quote("my-finetune-7b", "openai") is None
    assert quote("llama-3.1-8b", "vllm") is None


def test_lookups_never_touch_the_network() -> None:
    """In a fresh process where every socket connection fails, prices still come:
    the bundled snapshot is all that is read."""
    script = (
        "import socket\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('network used')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from service.profiles.prices import quote\n"
        "print(quote('gpt-4o', 'openai').input_usd_per_mtok)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "2.5"
