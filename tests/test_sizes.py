import pytest
from hypothesis import given, settings, strategies as st

from gpuipc_bench.errors import UsageError
from gpuipc_bench.sizes import format_size, parse_size, parse_sizes


@pytest.mark.parametrize("text,value", [
    ("4", 4), ("4B", 4), ("4KiB", 4096), ("4K", 4096), ("4k", 4096), ("256MiB", 256 << 20),
    ("1G", 1 << 30), ("1 GiB", 1 << 30), ("1kB", 1000), ("2MB", 2_000_000), ("1.5K", 1536),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "0", "-4", "4X", "K", "1.3", "4KiBB", "1.5B", "99999T"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_ranges_and_lists():
    assert parse_sizes("4..64") == (4, 8, 16, 32, 64)
    assert parse_sizes("4..1K:x4") == (4, 16, 64, 256, 1024)
    assert parse_sizes("1M, 4K,4K") == (4096, 1 << 20)
    assert parse_sizes("4..8,1M") == (4, 8, 1 << 20)
    assert parse_sizes("3..3") == (3,)


@pytest.mark.parametrize("text,words", [
    ("1G..4K", "reversed"), ("4..1G:x1", "step"), ("4..1G:y2", "step"), ("0..4K", "at least 1"),
    (",", "empty"), ("", "no sizes"), ("4..", "not a byte size"),
])
def test_range_errors_say_why(text, words):
    with pytest.raises(UsageError, match=words):
        parse_sizes(text)


def test_format_size():
    assert format_size(4) == "4 B"
    assert format_size(4096) == "4 KiB"
    assert format_size(256 << 20) == "256 MiB"
    assert format_size(1 << 30) == "1 GiB"
    assert format_size(1536) == "1.5 KiB"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_parser_never_crashes_with_anything_but_our_error(text):
    try:
        sizes = parse_sizes(text)
    except UsageError:
        return
    assert sizes and all(isinstance(s, int) and s > 0 for s in sizes)
    assert list(sizes) == sorted(set(sizes))
