"""Memory of the hash memo (service/ingest/hashing.py), per remembered hash, as
docs/deployment.md ("Sizing") quotes it: `tracemalloc` over a `KeyMemo` filled with
one generation of fresh strings of 16, 64 and 200 characters, over
`SessionPrompts` holding arrays of 16 and 1,000 such hashes, and over
`ArrayChunks` holding the runs of arrays of 1,000. Then what keying a hash costs:
`key_bytes` of a 16-digit string against a new BLAKE2b object each (the same
digest; the baseline, in the same run), and `KeyMemo.pack` of 1,000 known
hashes. Not a test: prints.

    .venv/bin/python bench/hash_memo.py [--entries 100000]
"""

import argparse
import sys
import timeit
import tracemalloc
from collections.abc import Callable
from hashlib import blake2b
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.ingest.array_memos import ArrayChunks, SessionPrompts
from service.ingest.hashing import KeyMemo, key_bytes


def pack_text(text: bytes) -> bytes:
    return b"".join(map(key_bytes, orjson.loads(text)))


def traced(fill: Callable[[], tuple[int, object]]) -> tuple[float, int]:
    """Bytes allocated by `fill` and kept by what it returns (measured while that is
    alive), and how many hashes it says that holds."""
    tracemalloc.start()
    held, keeper = fill()
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del keeper
    return kept, held


def hex_of(width: int, value: int) -> str:
    return f"{value:0{width}x}"


def memo_fill(width: int, entries: int) -> Callable[[], tuple[int, object]]:
    def fill() -> tuple[int, object]:
        memo = KeyMemo(entries + 1)  # one full generation, no rotation
        for start in range(0, entries, 1000):
            memo.pack([hex_of(width, i) for i in range(start, min(start + 1000, entries))])
        return len(memo), memo

    return fill


def prompts_fill(width: int, per_array: int, hashes: int) -> Callable[[], tuple[int, object]]:
    def fill() -> tuple[int, object]:
        prompts = SessionPrompts(hashes + per_array)  # one generation
        for session in range(hashes // per_array):
            first = session * per_array
            text = orjson.dumps([hex_of(width, first + j) for j in range(per_array)])
            prompts.pack(str(session), text, pack_text)
        return hashes // per_array * per_array, prompts

    return fill


def chunks_fill(width: int, per_array: int, hashes: int) -> Callable[[], tuple[int, object]]:
    def fill() -> tuple[int, object]:
        chunks = ArrayChunks(hashes + per_array)  # one generation
        for first in range(0, hashes // per_array * per_array, per_array):
            text = orjson.dumps([hex_of(width, first + j) for j in range(per_array)])
            chunks.pack(text, orjson.loads, lambda h: b"".join(map(key_bytes, h)))
        return hashes // per_array * per_array, chunks

    return fill


def fresh_object_key(value: str) -> bytes:
    """The baseline: `key_bytes` of a string as a new BLAKE2b object each time."""
    return blake2b(b"s:" + value.encode(), digest_size=8).digest()


def us_per_call(run: Callable[[], object], calls: int, repeat: int = 5) -> float:
    return min(timeit.repeat(run, number=1, repeat=repeat)) / calls * 1e6


def keying_costs() -> None:
    values = [hex_of(16, i) for i in range(100_000)]
    assert all(fresh_object_key(v) == key_bytes(v) for v in values[:1000])
    now = us_per_call(lambda: b"".join(map(key_bytes, values)), len(values))
    fresh = us_per_call(lambda: b"".join(map(fresh_object_key, values)), len(values))
    print(
        f"key_bytes       16-character hash: {now:.3f} us "
        f"(a new BLAKE2b object each: {fresh:.3f} us; ratio {now / fresh:.2f})"
    )
    memo = KeyMemo(len(values) + 1)
    known = values[:1000]
    memo.pack(known)
    known = [value.encode().decode() for value in known]  # new strings, as decoded
    took = us_per_call(lambda: memo.pack(known), 1, repeat=200)
    print(f"KeyMemo.pack    1,000 known 16-character hashes: {took:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    n = args.entries
    for width in (16, 64, 200):
        kept, held = traced(memo_fill(width, n))  # type: ignore[arg-type]
        print(
            f"KeyMemo         {width:>3}-character hashes: {kept / held:6.0f} B a remembered hash"
        )
    for width, per in ((16, 16), (16, 1000), (200, 1000)):
        kept, held = traced(prompts_fill(width, per, n))
        print(
            f"SessionPrompts  {width:>3}-character hashes, {per:>5} an array: "
            f"{kept / held:6.0f} B a held hash"
        )
    for width in (16, 200):
        kept, held = traced(chunks_fill(width, 1000, n))
        print(
            f"ArrayChunks     {width:>3}-character hashes,  1000 an array: "
            f"{kept / held:6.0f} B a held hash"
        )
    keying_costs()


if __name__ == "__main__":
    main()
