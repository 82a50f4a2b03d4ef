"""The decode steps' key slots kept across steps (engine/slot_rows.py) are the slots their block tables give,
step after step: as a sequence grows into new blocks, when it is preempted and given other blocks, for batches
of one (a view of the kept row) and of several (rows padded), and they are never longer-lived than the batch."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from engine.slot_rows import SlotRows

BLOCK = 4


@dataclass
class _Req:
    request_id: str


@dataclass
class _Seq:  # what SlotRows reads of a ScheduledSeq
    request: _Req
    end_pos: int
    block_ids: list[int] = field(default_factory=list)


def _reference(s: _Seq) -> list[int]:
    return [s.block_ids[p // BLOCK] * BLOCK + p % BLOCK for p in range(s.end_pos)]


def _check(rows: SlotRows, seqs: list[_Seq]) -> np.ndarray:
    table, ctx, last = rows.table(seqs)  # type: ignore[arg-type]
    assert table.dtype == np.int64 and table.flags["C_CONTIGUOUS"] and ctx.dtype == np.int64
    assert table.shape == (len(seqs), max(s.end_pos for s in seqs))
    assert ctx.tolist() == [s.end_pos for s in seqs]
    for i, s in enumerate(seqs):
        assert table[i, : s.end_pos].tolist() == _reference(s)
        assert (table[i, s.end_pos :] == 0).all()  # the padding is a valid slot, masked by the context length
        assert last[i] == _reference(s)[-1]
    return table


def test_a_growing_sequence_keeps_its_slots_and_extends_them_by_its_new_blocks() -> None:
    rows = SlotRows(BLOCK)
    s = _Seq(_Req("a"), 3, [7])
    for _ in range(14):  # through three block boundaries
        if s.end_pos > len(s.block_ids) * BLOCK:
            s.block_ids.append([2, 9, 5][len(s.block_ids) - 1])  # the same list object grows, as the scheduler's does
        _check(rows, [s])
        s.end_pos += 1


def test_batch_of_one_is_a_view_of_the_kept_row() -> None:
    rows = SlotRows(BLOCK)
    s = _Seq(_Req("a"), 6, [3, 8])
    first = _check(rows, [s])
    s.end_pos = 7
    second = _check(rows, [s])
    assert np.shares_memory(first, second)  # nothing rebuilt, nothing copied


def test_a_preempted_sequence_given_other_blocks_is_rebuilt() -> None:
    rows = SlotRows(BLOCK)
    s = _Seq(_Req("a"), 6, [3, 8])
    _check(rows, [s])
    s.block_ids[:] = [11, 12]  # freed and re-allocated: same length, other blocks
    _check(rows, [s])
    s.block_ids[:] = [4, 12, 13]  # other first block, and longer
    s.end_pos = 9
    _check(rows, [s])
    s.block_ids[:] = [4]  # shorter than what was kept
    s.end_pos = 2
    _check(rows, [s])


def test_a_batch_of_several_pads_its_shorter_rows_and_forgets_who_left() -> None:
    rows = SlotRows(BLOCK)
    a, b, c = _Seq(_Req("a"), 9, [1, 2, 3]), _Seq(_Req("b"), 2, [6]), _Seq(_Req("c"), 5, [9, 10])
    _check(rows, [a, b, c])
    _check(rows, [c, a])
    assert set(rows._rows) == {"a", "c"}  # b left the batch: its row is not kept
    b.block_ids[:] = [0]
    _check(rows, [a, b, c])


def test_a_block_table_shorter_than_the_context_is_refused() -> None:
    with pytest.raises(ValueError, match="fewer than"):
        SlotRows(BLOCK).table([_Seq(_Req("a"), 5, [1])])  # type: ignore[list-item]
