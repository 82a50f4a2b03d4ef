"""The KV slot of every key of every decoding sequence, kept across steps.

A decode step's attention reads each sequence's keys by slot: a [B, Lmax] int64 table, row-major as the
kernels read it. Rebuilding it from the block tables every step (numpy over every key) took ~13% of the engine
thread at batch 1 under `finserve serve`, and each numpy call released the GIL to the event loop mid-step. A
sequence's slots are a pure function of its block table, which only grows while it decodes, so each row is kept
and extended by the blocks the sequence gained; a block table that no longer starts with the kept one (the
sequence was preempted and given other blocks) is rebuilt. At batch 1 the table is a view of the kept row.
"""
from __future__ import annotations

import numpy as np

from engine.outputs import ScheduledSeq


class SlotRows:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self._offsets = np.arange(block_size, dtype=np.int64)
        self._rows: dict[str, tuple[list[int], np.ndarray]] = {}  # request id -> (its blocks, their slots)

    def _slots(self, blocks: list[int]) -> np.ndarray:
        return (np.asarray(blocks, dtype=np.int64)[:, None] * self.block_size + self._offsets).ravel()

    def _row(self, s: ScheduledSeq) -> tuple[list[int], np.ndarray]:
        """A copy of `s`'s block table and the slots of keys 0 .. len(block_ids) x block_size - 1."""
        blocks = s.block_ids
        kept = self._rows.get(s.request.request_id)
        if kept is not None:
            known, slots = kept
            n = len(known)
            if len(blocks) == n and blocks == known:
                return kept
            if len(blocks) > n and blocks[:n] == known:  # grew: only the new blocks' slots are computed
                return list(blocks), np.concatenate((slots, self._slots(blocks[n:])))
        return list(blocks), self._slots(blocks)

    def table(self, seqs: list[ScheduledSeq]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """([B, Lmax] slots, shorter rows padded with slot 0 and masked by their context length; [B] context
        lengths (keys 0..end_pos-1, the new token included); each row's last slot, where its new K/V goes).

        Keeps the rows of `seqs` only: a sequence not in this step is rebuilt when it comes back."""
        rows: dict[str, tuple[list[int], np.ndarray]] = {}
        slots: list[np.ndarray] = []
        ctx = [s.end_pos for s in seqs]
        for s in seqs:
            kept = rows[s.request.request_id] = self._row(s)
            if kept[1].shape[0] < s.end_pos:
                raise ValueError(f"request {s.request.request_id}: {len(s.block_ids)} blocks hold fewer than its "
                                 f"{s.end_pos} keys")
            slots.append(kept[1])
        self._rows = rows
        lmax = max(ctx)
        last = [int(row[c - 1]) for row, c in zip(slots, ctx, strict=True)]
        if len(slots) == 1:
            return slots[0][:lmax].reshape(1, lmax), np.array(ctx, dtype=np.int64), last
        table = np.zeros((len(slots), lmax), dtype=np.int64)
        for i, (row, c) in enumerate(zip(slots, ctx, strict=True)):
            table[i, :c] = row[:c]
        return table, np.array(ctx, dtype=np.int64), last
