"""The receive-pack command list read from a streamed body (proxy/clauses/git.py:
`CommandReader`): whatever the chunking, the answer is the one of the whole body, it
comes as soon as the bytes decide it, and it never waits past `COMMANDS_LIMIT`."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.git import (
    COMMANDS_LIMIT,
    CommandReader,
    Commands,
    pkt,
    read_commands,
)

OLD, NEW = "a" * 40, "b" * 40
PACK = b"PACK\x00\x00\x00\x02" + bytes(range(256)) * 4


def commands(*refs: str, caps: str = "report-status side-band-64k") -> bytes:
    lines = [f"{OLD} {NEW} {ref}" for ref in refs]
    lines[0] += "\0" + caps
    return b"".join(pkt(f"{line}\n".encode()) for line in lines) + b"0000"


def fed(body: bytes, cuts: list[int]) -> Commands | str:
    """The reader's answer to `body` split at `cuts` (the last piece ends the body)."""
    reader = CommandReader()
    edges = [0, *sorted(set(cuts)), len(body)]
    for start, stop in zip(edges, edges[1:], strict=False):
        answer = reader.feed(body[start:stop])
        if answer is not None:
            return answer
    answer = reader.feed(b"", ended=True)
    assert answer is not None  # the end always decides
    return answer


VALID = commands("refs/heads/agent/a", "refs/heads/agent/b") + PACK
MALFORMED = [
    commands("refs/heads/a")[:-4],  # no flush, body ends
    b"00zz" + PACK,
    pkt(b"\xff\xfe\n") + b"0000",
    b"0000" + PACK,  # an empty list with a pack after it
    b"0003",
]


def test_every_split_of_a_push_yields_the_commands_of_the_whole() -> None:
    whole = read_commands(VALID)
    assert isinstance(whole, Commands) and len(whole.commands) == 2
    for cut in range(len(VALID) + 1):
        assert fed(VALID, [cut]) == whole, cut


def test_every_split_of_a_malformed_list_is_refused_alike() -> None:
    for body in MALFORMED:
        whole = read_commands(body)
        assert isinstance(whole, str)
        for cut in range(len(body) + 1):
            assert fed(body, [cut]) == whole, (body, cut)


def test_the_answer_comes_with_the_flush_before_the_pack() -> None:
    reader = CommandReader()
    head = commands("refs/heads/agent/a")
    assert reader.feed(head[:-1]) is None
    assert isinstance(reader.feed(head[-1:]), Commands)
    assert bytes(reader.held) == head
    assert isinstance(reader.feed(PACK), Commands) and bytes(reader.held) == head  # answered


def test_the_probe_is_decided_only_at_the_end_of_the_body() -> None:
    reader = CommandReader()
    assert reader.feed(b"0000") is None  # a pack may follow: not yet the probe
    probe = reader.feed(b"", ended=True)
    assert isinstance(probe, Commands) and probe.commands == ()
    assert read_commands(b"0000", ended=False) is None
    assert isinstance(read_commands(b"0000PACK", ended=False), str)


def test_a_list_that_never_ends_is_refused_at_the_bound_not_later() -> None:
    line = pkt(f"{OLD} {NEW} refs/heads/agent/x\n".encode())
    reader = CommandReader()
    answer = None
    sent = 0
    while answer is None:
        assert sent <= COMMANDS_LIMIT  # never reads on past the bound
        answer = reader.feed(line)
        sent += len(line)
    assert isinstance(answer, str) and "within the bound" in answer
    assert len(reader.held) < COMMANDS_LIMIT + len(line)


def test_one_line_longer_than_the_bound_is_refused_from_its_length() -> None:
    assert read_commands(b"ffff", ended=False) is None  # would end within the bound: wait
    line = pkt(f"{OLD} {NEW} refs/heads/agent/x\n".encode())
    assert "within the bound" in str(read_commands(line + b"ffff", ended=False))


def test_a_byte_at_a_time_costs_what_it_costs_whole() -> None:
    body = b"".join(pkt(f"{OLD} {NEW} refs/heads/agent/{i}\n".encode()) for i in range(500))
    reader = CommandReader()
    for i in range(len(body)):
        assert reader.feed(body[i : i + 1]) is None
    answer = reader.feed(b"0000")
    assert isinstance(answer, Commands) and len(answer.commands) == 500


@settings(max_examples=300, deadline=None)
@given(
    refs=st.lists(st.from_regex(r"refs/heads/[a-z/]{1,20}", fullmatch=True), min_size=1,
                  max_size=8),
    tail=st.binary(max_size=300),
    data=st.data(),
)  # fmt: skip
def test_random_chunkings_of_a_push_agree_with_the_whole(
    refs: list[str], tail: bytes, data: st.DataObject
) -> None:
    body = commands(*refs) + tail
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=20))
    whole = read_commands(body)
    assert isinstance(whole, Commands) and [c.ref for c in whole.commands] == refs
    assert fed(body, cuts) == whole


@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=400), data=st.data())
def test_random_bytes_in_random_chunks_agree_with_the_whole(
    body: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=20))
    assert fed(body, cuts) == read_commands(body)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from([commands("refs/heads/a"), b"", pkt(f"shallow {OLD}\n".encode())]),
    noise=st.binary(min_size=1, max_size=200),
    data=st.data(),
)
def test_mutated_lists_in_random_chunks_agree_with_the_whole(
    prefix: bytes, noise: bytes, data: st.DataObject
) -> None:
    body = bytearray(prefix + noise)
    at = data.draw(st.integers(0, len(body) - 1))
    body[at] = data.draw(st.integers(0, 255))
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=10))
    assert fed(bytes(body), cuts) == read_commands(bytes(body))
