"""The server-sent-events parser: line endings, comments, multi-line data, split reads."""

import pytest

from backends.http.sse import SSEEvent, SSEParser


def parse_all(*chunks: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.close()


def datas(*chunks: bytes) -> list[str]:
    return [e.data for e in parse_all(*chunks)]


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(sep):
    stream = b"data: one" + sep + sep + b"data: two" + sep + sep + b"data: [DONE]" + sep + sep
    assert datas(stream) == ["one", "two", "[DONE]"]


def test_comments_and_keepalives_are_skipped():
    stream = b': keepalive 0/40\n\n: ping - 2026-11-30 11:00:00\n\ndata: {"a":1}\n\n:\n\n'
    assert datas(stream) == ['{"a":1}']


def test_multi_line_data_is_joined_with_newlines():
    stream = b'data: {"a":\ndata: 1}\n\n'
    assert datas(stream) == ['{"a":\n1}']


def test_space_after_colon_dropped_once_and_fields():
    events = parse_all(b"event: message\nid: 7\nretry: 100\ndata:  two spaces\ndata:none\nunknown: x\n\n")
    assert events == [SSEEvent(" two spaces\nnone", event="message", id="7")]


def test_field_without_colon_and_empty_data():
    assert datas(b"data\n\n") == [""]  # a "data" line with no value still makes an event
    assert datas(b"event: x\n\n") == []  # an event without data is not dispatched


def test_split_anywhere_byte_by_byte():
    stream = 'data: {"text": "héllo €"}\r\n\r\n: c\r\ndata: b\r\n\r\n'.encode()
    parser = SSEParser()
    events = []
    for i in range(len(stream)):
        events += parser.feed(stream[i : i + 1])
    assert [e.data for e in events] == ['{"text": "héllo €"}', "b"]


def test_crlf_split_between_reads_is_one_line_end():
    # "\r" at the end of one read and "\n" at the start of the next must not make a blank line
    assert datas(b"data: a\r", b"\ndata: b\r\n", b"\r\n") == ["a\nb"]


def test_events_complete_as_soon_as_their_blank_line_arrives():
    parser = SSEParser()
    assert parser.feed(b"data: 1\n") == []
    assert [e.data for e in parser.feed(b"\ndata: 2")] == ["1"]
    assert [e.data for e in parser.feed(b"\n\n")] == ["2"]


def test_unterminated_last_event_is_kept_at_close():
    assert datas(b"data: 1\n\ndata: last") == ["1", "last"]


def test_a_long_event_in_many_small_reads_is_one_event():
    from backends.http.sse import SSEParser

    parser = SSEParser()
    body = "x" * 200_000
    wire = f"data: {body}\n\n".encode()
    events = []
    for i in range(0, len(wire), 7):  # a line spanning ~28,000 reads, joined once at its end
        events += parser.feed(wire[i : i + 7])
    assert [e.data for e in events] == [body]


def test_a_held_carriage_return_still_ends_its_line():
    from backends.http.sse import SSEParser

    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert [e.data for e in parser.feed(b"\rdata: b\n\n")] == ["a", "b"]  # \r then \r: a blank line ended "a"


def test_an_event_over_the_limit_raises():
    import pytest

    from backends.http.sse import SSEParser, SSETooLarge

    parser = SSEParser(max_event_chars=1000)
    with pytest.raises(SSETooLarge):
        for _ in range(100):
            parser.feed(b"y" * 50)  # one unending line
    parser = SSEParser(max_event_chars=1000)
    with pytest.raises(SSETooLarge):
        for _ in range(100):
            parser.feed(b"data: " + b"z" * 40 + b"\n")  # many data lines, never a blank one


STREAMS = [
    b'data: {"a":1}\n\ndata: {"b":2}\n\n: keepalive\n\ndata: x\ndata: y\n\n\n\ndata: [DONE]\n\n',
    b"event: message\nid: 3\ndata: one\n\ndata:two\n\ndata\n\n:\n\nretry: 5\ndata: last",
    'data: {"t": "h\u00e9llo \u20ac"}\n\ndata: {"t": "\u00e9"}\n\n'.encode() * 20,
    b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\n\n",
    b"\n\n\ndata: after blank lines\n\n\n",
]


@pytest.mark.parametrize("stream", STREAMS, ids=range(len(STREAMS)))
def test_feed_data_is_feed_for_any_split(stream):
    import random

    expected = datas(stream)
    rng = random.Random(7)
    for trial in range(300):
        cuts = sorted(rng.sample(range(1, len(stream)), k=min(len(stream) - 1, rng.randint(0, 12))))
        pieces = [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)])]
        parser = SSEParser()
        got = [d for piece in pieces for d in parser.feed_data(piece)] + [e.data for e in parser.close()]
        assert got == expected, (trial, pieces)


def test_feed_data_limits_a_one_line_event():
    from backends.http.sse import SSETooLarge

    with pytest.raises(SSETooLarge):
        SSEParser(max_event_chars=1000).feed_data(b"data: " + b"z" * 2000 + b"\n\n")
