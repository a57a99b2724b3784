import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiling import Split


def _check_cover(split: Split) -> None:
    covered = []
    for start, count in split.ranges():
        assert count > 0
        covered.extend(range(start, start + count))
    assert covered == list(range(split.total))


@given(st.integers(0, 20_000), st.integers(1, 128))
def test_even_covers_exactly_and_balances(total, cores):
    split = Split.even(total, cores)
    _check_cover(split)
    assert split.parts == min(total, cores)
    if split.parts:
        assert max(split.counts()) - min(split.counts()) <= 1
        assert split.big_cores == (total % split.parts or split.parts)


@given(st.integers(0, 20_000), st.integers(1, 128))
def test_quota_gives_each_core_the_ceiling(total, cores):
    split = Split.quota(total, cores)
    _check_cover(split)
    if total:
        each = -(-total // cores)
        assert split.big_items == each
        assert split.parts == -(-total // each)
        assert split.counts()[-1] == total - (split.parts - 1) * each


@given(st.integers(0, 20_000), st.integers(1, 5000))
def test_blocks_full_then_shorter_tail(total, block):
    split = Split.blocks(total, block)
    _check_cover(split)
    if total:
        assert split.tail_items < split.block_items
        assert split.full_blocks == total // min(block, total)


def test_hand_examples():
    assert Split.even(64, 48).describe() == "16x2+32x1"
    assert Split.even(96, 48).describe() == "48x2"
    assert Split.quota(64, 48).ranges()[-1] == (62, 2) and Split.quota(64, 48).parts == 32
    blocks = Split.blocks(32, 7)
    assert (blocks.full_blocks, blocks.block_items, blocks.tail_items) == (4, 7, 4)
    assert Split.blocks(5, 10).ranges() == ((0, 5),)


def test_rejects_inconsistent_splits():
    from tiling.split import SplitKind

    with pytest.raises(ValueError, match="cover"):
        Split(SplitKind.EVEN, 10, 3, 3, 0, 0)
    with pytest.raises(ValueError, match="smaller"):
        Split(SplitKind.EVEN, 10, 1, 3, 1, 7)
    with pytest.raises(ValueError, match="positive"):
        Split.even(4, 0)
