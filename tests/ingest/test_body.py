import gzip
import random
import time
import zlib

import orjson
import pytest

from service.ingest.body import BodyTooLarge, UndecodableBody, decompress, split_records


def test_ndjson_keeps_lines_verbatim_and_skips_blank_ones() -> None:
    items = split_records(b'{"a": 1}\r\n\n  \n{"a": 2} \n{"a": \n')
    assert [i.index for i in items] == [0, 1, 2]
    assert items[0].value == {"a": 1} and items[0].raw == b'{"a": 1}'
    assert items[1].raw == b'{"a": 2} '
    assert items[2].error is not None and items[2].raw == b'{"a": '


def test_array_and_single_object() -> None:
    assert [i.value for i in split_records(b' [{"a": 1}, 2]')] == [{"a": 1}, 2]
    assert [i.value for i in split_records(b'\xef\xbb\xbf{"a": 1}')] == [{"a": 1}]
    assert split_records(b"[1]")[0].verbatim() == b"1"


def test_a_body_with_no_json_at_all_is_undecodable() -> None:
    with pytest.raises(UndecodableBody):
        split_records(b"nope\nstill nope")


def test_gzip_members_and_magic_detection() -> None:
    body = gzip.compress(b'{"a": 1}\n') + gzip.compress(b'{"a": 2}\n')
    assert decompress(body, None, 1000) == b'{"a": 1}\n{"a": 2}\n'
    assert decompress(body, "gzip", 1000) == b'{"a": 1}\n{"a": 2}\n'


def test_gzip_bomb_stops_at_the_limit() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(b"\0" * (10 * 1024 * 1024)) + compressor.flush()
    with pytest.raises(BodyTooLarge):
        decompress(bomb, "gzip", 1024 * 1024)


def test_plain_body_over_the_decompressed_limit() -> None:
    with pytest.raises(BodyTooLarge):
        decompress(b"x" * 11, None, 10)


@pytest.mark.parametrize(
    ("body", "encoding"),
    [(b"\x1f\x8bnot gzip", None), (gzip.compress(b"{}")[:-4], "gzip"), (b"{}", "br")],
)
def test_bad_encodings(body: bytes, encoding: str | None) -> None:
    with pytest.raises(UndecodableBody):
        decompress(body, encoding, 1000)


def test_large_ndjson_round_trip() -> None:
    lines = [orjson.dumps({"i": i}) for i in range(10_000)]
    items = split_records(b"\n".join(lines))
    assert [i.value["i"] for i in items] == list(range(10_000))


EMPTY_MEMBER = gzip.compress(b"", mtime=0)  # 20 bytes


def test_many_gzip_members_take_linear_time() -> None:
    """A 10 MiB body (the limit as sent) of empty members and one record: each
    member once, not the rest of the body copied per member (that took minutes)."""
    record = gzip.compress(b'{"a": 1}\n')
    count = (10 * 1024 * 1024 - len(record)) // len(EMPTY_MEMBER)
    body = EMPTY_MEMBER * count + record
    started = time.thread_time()
    assert decompress(body, "gzip", 64 * 1024 * 1024) == b'{"a": 1}\n'
    cpu_s = time.thread_time() - started
    assert cpu_s < 5, f"{count:,} members took {cpu_s:.1f} s of CPU"


def test_gzip_limit_is_exact_across_members() -> None:
    body = gzip.compress(b"a" * 600) + EMPTY_MEMBER + gzip.compress(b"b" * 400)
    assert decompress(body, "gzip", 1000) == b"a" * 600 + b"b" * 400
    with pytest.raises(BodyTooLarge) as over:
        decompress(body, "gzip", 999)
    assert str(over.value) == "decompressed body is over 999 bytes"


def test_large_members_and_nul_padding() -> None:
    """Members larger than the input windows (incompressible, so many windows) and
    NUL padding between and after members, as some writers pad to a block size."""
    first, second = random.Random(0).randbytes(300_000), random.Random(1).randbytes(70_000)
    body = gzip.compress(first, 1) + b"\0" * 100_000 + gzip.compress(second, 1) + b"\0" * 7
    assert decompress(body, None, 1 << 20) == first + second


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (
            b"not gzip at all",
            "body is not valid gzip: Error -3 while decompressing data: incorrect header check",
        ),
        (gzip.compress(b"{}")[:-4], "gzip stream is truncated"),
        (b"\0\0\x1f", "gzip stream is truncated"),
    ],
)
def test_what_follows_a_member_must_be_another_member(tail: bytes, message: str) -> None:
    with pytest.raises(UndecodableBody) as error:
        decompress(gzip.compress(b"{}") + tail, "gzip", 1000)
    assert str(error.value) == message


def test_a_gzip_body_is_admitted_at_its_inflated_size() -> None:
    """Once, with the exact size: for a small body after inflating it, for one over
    1 MiB after a first pass that counts without keeping (the size is the same)."""
    small = gzip.compress(b"a" * 5000) + gzip.compress(b"b" * 3000)
    large = gzip.compress(b"c" * (3 << 20)) + gzip.compress(b"d" * 10)
    for body, inflated in (
        (small, b"a" * 5000 + b"b" * 3000),
        (large, b"c" * (3 << 20) + b"d" * 10),
    ):
        asked: list[int] = []
        assert decompress(body, "gzip", 64 << 20, admit=asked.append) == inflated
        assert asked == [len(inflated)]

    def refuse(size: int) -> None:
        raise RuntimeError(f"no room for {size}")

    with pytest.raises(RuntimeError, match=f"no room for {(3 << 20) + 10}"):
        decompress(large, None, 64 << 20, admit=refuse)
    bomb = gzip.compress(b"\0" * (4 << 20))
    with pytest.raises(BodyTooLarge):  # refused while counting: never admitted
        decompress(bomb, "gzip", 2 << 20, admit=refuse)
    assert decompress(b"plain", None, 10, admit=refuse) == b"plain"  # not gzip: not asked
