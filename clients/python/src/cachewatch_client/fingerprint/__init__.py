"""Prefix fingerprints of chat requests, and why two requests stop sharing a prefix.

This package uses the standard library only. It is the one home of the
fingerprint: the client (`cachewatch_client.instrument`, `record`) computes it in
applications, and the service imports it from here (its distribution depends on
the client's) to fingerprint bodies it receives (OTLP, transcripts).
`cachewatch diff` is the service's `service/diff_cli.py`.

`fingerprint(body)` turns an OpenAI or Anthropic chat request body into the usage
record fields of contract section 1: `segments` (each with its `norm_hash`),
`prefix_hash`/`prefix_tokens` and `block_size`/`block_hashes`.
`explain_divergence(a, b)` tells where two requests stop sharing a prefix, whether
the part there differs only in rendering and, when it recognises one, which
anti-pattern did it.

How a request is serialized
---------------------------
A request is split into *parts*, in the order the provider renders them:
`tools`, `response_format` (the output schema), `system`, then `message[0]`,
`message[1]`, ... (the conversation after the system messages; so the OpenAI and
Anthropic forms of one conversation name the same parts). Each part is written as
canonical JSON: keys sorted, fixed separators, UTF-8, so the same request gives the
same bytes whatever the dict key order, process or `PYTHONHASHSEED` (no `hash()`
anywhere: hashes are BLAKE2b). Lists keep their order: a reordered tools list
renders a different prompt, so it must fingerprint differently. The price of
sorting keys: JSON differing only in key order fingerprints alike, although the
provider, which renders schemas in the order sent, may see other tokens;
`explain_divergence` compares the JSON as sent too and reports it (`reordered_keys`).

Canonical also means that representations the provider renders identically are
written identically: string content equals one text block, and Anthropic's
`cache_control` markers are dropped (they say where to write the cache, they are no
prompt text). Binary payloads (a `data:` URL, any string of over 256 base64
characters) are replaced by their SHA-256, so a 2 MB image does not count as 500k
tokens. The Responses API form (`instructions`, `input`, `text.format`) and the
legacy `functions` list are read as system, messages, schema and tools. What is
*not* hashed: the model name (records carry it, and reuse is scoped by it), and
sampling or routing options (`temperature`, `tool_choice`, `metadata`...).

The serialized request is the concatenation, for each part, of its name, a newline,
its canonical JSON and a newline (`serialize_request`).

Each segment's `norm_hash` hashes the part's canonical JSON after normalizing how it
was rendered (whitespace and newlines, JSON key order also inside strings, image
`detail`, URL query strings; `normalize` says what and why): two renderings of one
prompt share it and differ in `hash`, while a change of content changes both.

Tokens, approximately
---------------------
Without a tokenizer, a token is approximated as `BYTES_PER_TOKEN` = 4 bytes of that
UTF-8 serialization, and a block is `block_size` such tokens (4 * block_size
bytes). Why bytes, not characters: English prose and JSON run at 3-4.5 bytes per
token in current tokenizers, and counting bytes keeps CJK text (3 bytes a
character, 1-2 tokens a character) within 2x, where counting characters would be
off by 4-6x. Limits: counts are typically within +-25% for English and JSON; the
JSON punctuation and the part headers add a little that the provider's chat
template replaces by its own few tokens; block boundaries do not fall on real token
boundaries, so `cacheable_tokens` derived from them is approximate too. An image
counts `IMAGE_TOKENS_LOW` tokens at `detail: "low"` and `IMAGE_TOKENS` otherwise
(OpenAI's figures for a low and a 1024x1024 high-detail image; Anthropic's are of
the same order); other binary payloads (audio, PDF) count only their digest.

Pass `tokenizer` (text -> token ids) for exact counts: each part's text is then
tokenized on its own (a change in one part never re-tokenizes an earlier one) and
blocks are exactly `block_size` token ids of that serialization. They are still
tokens of this serialization, not of the provider's chat template.

`block_hashes` are chained: hash i covers blocks 0..i (the hash of hash i-1 and
block i), so equal hash i means an equal prefix up to the end of block i. The last
block may be partial (as in Mooncake's `hash_ids`), so a request shorter than one
block still gets a fingerprint. At most `MAX_BLOCKS` blocks and `MAX_SEGMENTS`
segments are returned (the ingestion limits): the start of a prompt is what matters.

Layout
------
`canonical` writes a value as canonical JSON and holds the hashing primitives;
`parts` splits a request body into its parts in rendering order; `normalize` undoes
their rendering for `norm_hash`; `blocks` computes `fingerprint` (segments, token
counts, chained block hashes); `divergence` explains where two requests diverge,
using `locate` (the first difference, its excerpts), `hints` and `values` (the
anti-pattern rules), `normalize` (whether it is only rendering) and `results` (what
it returns).
"""

from __future__ import annotations

from .blocks import (
    BYTES_PER_TOKEN,
    DEFAULT_BLOCK_SIZE,
    MAX_BLOCKS,
    MAX_SEGMENTS,
    PREFIX_PARTS,
    RecordFields,
    SegmentFields,
    Tokenizer,
    fingerprint,
    serialize_request,
)
from .canonical import IMAGE_TOKENS, IMAGE_TOKENS_LOW, canonical_json
from .divergence import explain_divergence
from .normalize import (
    ALL_RENDERINGS,
    Rendering,
    normalize,
    normalized_json,
    rendering_difference,
)
from .results import Divergence, Hint, HintCode

__all__ = [
    "ALL_RENDERINGS",
    "BYTES_PER_TOKEN",
    "DEFAULT_BLOCK_SIZE",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "MAX_BLOCKS",
    "MAX_SEGMENTS",
    "PREFIX_PARTS",
    "Divergence",
    "Hint",
    "HintCode",
    "RecordFields",
    "Rendering",
    "SegmentFields",
    "Tokenizer",
    "canonical_json",
    "explain_divergence",
    "fingerprint",
    "normalize",
    "normalized_json",
    "rendering_difference",
    "serialize_request",
]
