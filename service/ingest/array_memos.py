"""Memos of whole block-hash arrays, read as their JSON text: a session's last one
(`SessionPrompts`) and runs of hashes any array held (`ArrayChunks`).

`service.ingest.hashing.KeyMemo` keys one hash at a time. On a long array that is
most of a record's ingest even when every hash is known: the decoded strings are
new objects, so each lookup hashes one and compares it with a string held
somewhere else in memory, 100-300 µs for 1,000 hashes, more than the rest of the
record's work. These two memos look up whole stretches of an array's text
instead, so that the hashes in them are neither decoded nor looked up one by one:

- `SessionPrompts`: a session's next turn repeats its last array (its history
  appended to, byte for byte); only the new hashes after it are keyed.
- `ArrayChunks`: a new session's first array is not its own last one, but mostly
  holds hashes other arrays held (a shared system prompt and tools, the files of
  one repository, a sub-agent's parent context), not always at the same offset.
  Its text is cut at points set by the content into runs of about 16 hashes,
  and each run's text is one lookup.

Both compare texts exactly and hold the keys that decoding those texts gave, so
nothing is assumed of the hashes (chained or not) and the keys are always those
of decoding the whole array. Both are bounded by the hashes they hold (two
generations of at most `hashes` each, like `KeyMemo`), sized together by
`use_memo` from `Settings.hash_memo_entries`.
"""

from collections.abc import Callable
from typing import Generic, TypeVar

from service.ingest.hashing import KEY_BYTES, MEMO, MIN_HIT_SHARE, SKIP_GENERATIONS

#: Reads a block-hash array's JSON text (None: not one), and keys a list of hashes
#: (None: a hash refused): what the fast path gives `ArrayChunks.pack`.
Decode = Callable[[bytes], list[str | int] | None]
Pack = Callable[[list[str | int]], bytes | None]
#: Keys an array's JSON text whole (None: not one the fast path takes).
PackText = Callable[[bytes], bytes | None]

_Key = TypeVar("_Key", str, bytes)
_Value = TypeVar("_Value")


class _Generations(Generic[_Key, _Value]):
    """Two dicts, the young one taking what is added: once it holds `limit`
    (the weights of what was added, summed), it becomes the old one, the old one
    is dropped, and a new young one starts. So at most about 2 x `limit` is held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.young: dict[_Key, _Value] = {}
        self.old: dict[_Key, _Value] = {}
        self.held = 0

    def get(self, key: _Key) -> _Value | None:
        found = self.young.get(key)
        return self.old.get(key) if found is None else found

    def put(self, key: _Key, value: _Value, weight: int) -> bool:
        """Add `value`; True when this started a new generation."""
        if not self.limit:
            return False
        self.young[key] = value
        self.held += weight
        if self.held < self.limit:
            return False
        self.old, self.young, self.held = self.young, {}, 0
        return True


class SessionPrompts:
    """The block-hash array each session sent last, as its JSON text, with its
    packed keys: a session's next turn, whose array starts with the last one's
    (its history appended to, byte for byte), reuses those keys and has only its
    new hashes keyed. About 8 bytes of keys and a hash's JSON text apiece, at most
    2 x `hashes` hashes (the arrays' lengths summed)."""

    def __init__(self, hashes: int) -> None:
        self.hashes = hashes
        self._held = _Generations[str, tuple[bytes, bytes]](hashes)

    def pack(self, session: str, text: bytes, pack_text: PackText) -> bytes | None:
        """The packed keys of the JSON array `text` sent in `session`: `pack_text`
        keys an array's text (None: not valid here)."""
        packed = self._continued(session, text, pack_text)
        if packed is None:
            packed = pack_text(text)
            if packed is None:
                return None
        if text.endswith(b"]"):
            self._held.put(session, (text[:-1], packed), len(packed) // KEY_BYTES)
        return packed

    def _continued(self, session: str, text: bytes, pack_text: PackText) -> bytes | None:
        """The keys of `text` from the session's last array when `text` is that
        array (up to its `]`) then `]` or `,` and more hashes; else None."""
        last = self._held.get(session)
        if last is None:
            return None
        start, keys = last
        # `[` alone: `[,` is not JSON
        if len(start) < 2 or len(text) <= len(start) or not text.startswith(start):
            return None
        follows = text[len(start)]
        if follows == _CLOSE:
            return keys if len(text) == len(start) + 1 else None
        if follows != _COMMA:
            return None
        more = pack_text(b"[" + text[len(start) + 1 :])
        if not more:  # `["a",]` is not JSON either
            return None
        return keys + more

    def resize(self, hashes: int) -> None:
        self.hashes = hashes
        self._held = _Generations(hashes)


_CLOSE, _COMMA, _OPEN = b"],["


class ArrayChunks:
    """The keys of runs of hashes seen in long arrays, by the runs' JSON text.

    Where an array is cut: after every string hash whose last character is `0`,
    the text `0",`; for hex digests a run is then 16 hashes on average. Cut points
    set by the content, not by the position, fall in the same places in two
    arrays wherever a stretch of hashes they share sits, so those arrays share
    its runs except at its ends. A cut is between two elements: in a JSON array
    an unescaped quote ends or starts a string, and a quote right after `0` is
    not escaped, so `0",` ends an element, then its comma. The text is thus
    `[` + run + `,` + run ... + `]`, and it is a valid array exactly when every
    run is a valid non-empty list of elements.

    A run held was decoded and keyed on its own before (`[` + run + `]`, by the
    caller's `decode` and `pack`, as any run not held is now). A run that is not
    valid alone makes the whole text go to `decode` and `pack`, which then key it
    or refuse it as they would have without the memo. So the keys are those of
    the whole array decoded, or it is refused as it would be.

    Only texts of at least `_MIN_BYTES` are cut: a short array is cheaper decoded
    whole. The memory is the runs' text and 8 bytes a hash, at most 2 x `hashes`
    hashes; a run found only in the old generation is copied into the young one,
    so the runs in use (a system prompt every session sends) stay. A generation
    that found fewer than `MIN_HIT_SHARE` of the runs it was asked for turns the
    cutting off for `SKIP_GENERATIONS` generations' worth of hashes (as `KeyMemo`
    does), so a flood of arrays of new hashes costs little more than decoding them whole."""

    def __init__(self, hashes: int) -> None:
        self.hashes = hashes
        self._held = _Generations[bytes, bytes](hashes)
        self._asked = self._found = self._skip = 0

    def pack(self, text: bytes, decode: Decode, pack: Pack) -> bytes | None:
        """The packed keys of the JSON array `text`, None when `decode` or `pack`
        refuse it."""
        last = len(text) - 1  # its `]`
        if (
            self._skip > 0
            or last < _MIN_BYTES
            or not self.hashes
            or text[0] != _OPEN
            or text[last] != _CLOSE
        ):
            return self._whole(text, decode, pack)
        find, held = text.find, self._held
        runs: list[bytes] = []
        start = 1
        while True:
            cut = find(_CUT, start, last)
            end = last if cut == -1 else cut + 2  # after the quote
            run = text[start:end]
            keys = held.young.get(run)
            if keys is None:
                keys = held.old.get(run)
                if keys is None:
                    keys = _run_keys(run, decode, pack)
                    if keys is None:
                        return self._whole(text, decode, pack)
                else:
                    self._found += 1
                self._added(run, keys)  # into the young generation: used lately
            else:
                self._found += 1
            runs.append(keys)
            if cut == -1:
                break
            start = end + 1  # past the comma
        self._asked += len(runs)
        return b"".join(runs)

    def _added(self, run: bytes, keys: bytes) -> None:
        if self._held.put(run, keys, len(keys) // KEY_BYTES):
            if self._found < self._asked * MIN_HIT_SHARE:
                self._skip = self.hashes * SKIP_GENERATIONS
            self._asked = self._found = 0

    def _whole(self, text: bytes, decode: Decode, pack: Pack) -> bytes | None:
        hashes = decode(text)
        if hashes is None:
            return None
        if self._skip > 0:
            self._skip -= len(hashes)
        return pack(hashes)

    def resize(self, hashes: int) -> None:
        self.hashes = hashes
        self._held = _Generations(hashes)
        self._asked = self._found = self._skip = 0


def _run_keys(run: bytes, decode: Decode, pack: Pack) -> bytes | None:
    """The keys of a run's elements, None when they are not a valid non-empty list."""
    hashes = decode(b"[" + run + b"]")
    return pack(hashes) if hashes else None


_CUT = b'0",'
# Below about 50 hex hashes (19 bytes each in the text) an array is decoded whole.
_MIN_BYTES = 1024

#: The process's memos of arrays, sized with `hashing.MEMO` by `use_memo`.
SESSION_PROMPTS = SessionPrompts(MEMO.entries)
ARRAY_CHUNKS = ArrayChunks(MEMO.entries)


def use_memo(entries: int) -> None:
    """Size the process's memos (`Settings.hash_memo_entries`): each holds at most
    two generations of `entries` hashes."""
    if MEMO.entries != entries:
        MEMO.resize(entries)
        SESSION_PROMPTS.resize(entries)
        ARRAY_CHUNKS.resize(entries)
