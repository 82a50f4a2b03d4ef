"""CUDA graphs of the torch model's decode-only step: one launch per step instead of a dozen kernels per layer.

On a GPU a small model's decode step is host-bound: eager torch launches every kernel of every layer from Python
(measured on an H200 with SmolLM2-135M: 21 ms a step at batch 1, the GPU idle nearly all of it; docs/BENCHMARKS.md,
"The engine on CUDA"). A CUDA graph records the whole forward once and replays it with one call.

A graph has fixed shapes, so batches are padded to a bucket: rows to the next of BATCH_BUCKETS, keys to the next
multiple of KEY_BUCKET. Graphs are captured lazily, one per (rows, keys) bucket met, all in one memory pool (the
engine replays one at a time and copies each result out before the next). Padding never touches a sequence's cache:
padding rows write their K/V into a scratch slot that the runner allocates past the block pool and no block owns,
and read only that slot; padding keys of real rows are masked out. A real row's arithmetic is the eager forward's
on the same padded shapes (tests/engine/test_cuda_graphs.py compares the two on the CPU with the graph replaced by
a re-run of the captured call; bench/cuda_check.py compares engine and HF transformers on a GPU).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
import torch

from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaModel

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

log = structlog.get_logger(__name__)

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
KEY_BUCKET = 256  # keys per sequence are padded to a multiple of this: a new graph every 256 tokens of context


@dataclass
class _Graph:
    """One captured (rows, keys) bucket: its static inputs, its output, and how to replay it."""
    ids: torch.Tensor  # [Bb]
    positions: torch.Tensor  # [Bb]
    slot_mapping: torch.Tensor  # [Bb]
    slots: torch.Tensor  # [Bb, Lb]
    mask: torch.Tensor  # [Bb, 1, 1, Lb]
    every_row: torch.Tensor  # [Bb] 0..Bb-1: the rows whose logits the graph computes
    logits: torch.Tensor  # [Bb, V]
    replay: Callable[[], None]


def bucket_rows(n: int) -> int | None:
    """The smallest row bucket holding n rows (None: more than the largest)."""
    return next((b for b in BATCH_BUCKETS if b >= n), None)


def bucket_keys(n: int) -> int:
    return -(-n // KEY_BUCKET) * KEY_BUCKET


class DecodeGraphs:
    """Replays `model.forward` for decode-only steps from graphs captured per shape bucket.

    `scratch_slot`: a slot of `kv_cache` no sequence uses (padding rows write there). `capture`: records one call
    and returns its replay (default: a CUDA graph; tests pass one that re-runs the call eagerly)."""

    def __init__(self, model: LlamaModel, kv_cache: torch.Tensor, scratch_slot: int, max_keys: int,
                 capture: Callable[[Callable[[], torch.Tensor]], tuple[torch.Tensor, Callable[[], None]]] | None = None):
        self.model, self.kv_cache, self.scratch = model, kv_cache, scratch_slot
        self.max_keys_bucket = bucket_keys(max_keys)
        self.device = kv_cache.device
        self._capture = capture or self._cuda_capture
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._failed: set[tuple[int, int]] = set()  # shapes whose capture raised: eager from then on
        self._pool: _POOL_HANDLE | None = None

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
            logits_rows: torch.Tensor) -> torch.Tensor | None:
        """The logits of `logits_rows` ([N, V] float32), as `model.forward` gives them on the padded batch, for a
        decode-only step on the torch path whose shape has a bucket; None for any other step, and for a shape whose
        graph could not be captured (out of memory, say: a warning logged once, eager from then on): the caller runs
        the model eagerly."""
        if (meta.prefills or meta.decode_slots is None or meta.decode_mask is None or meta.native_decode
                or meta.decode_start != 0 or meta.rope_rows is not None):  # per-sequence RoPE rows: not graph inputs
            return None
        b, keys = int(input_ids.shape[0]), int(meta.decode_slots.shape[1])
        rows_b, keys_b = bucket_rows(b), bucket_keys(keys)
        if rows_b is None or keys_b > self.max_keys_bucket or (shape := (rows_b, keys_b)) in self._failed:
            return None
        graph = self._graphs.get(shape)
        if graph is None:
            try:
                graph = self._graphs[shape] = self._record(rows_b, keys_b)
            except Exception as e:  # a graph is an optimisation: the step goes on without it
                self._failed.add(shape)
                log.warning("cuda_graph_capture_failed", rows=rows_b, keys=keys_b, error=f"{type(e).__name__}: {e}"[:300],
                            fallback="eager steps for this shape")
                return None
        self._fill(graph, b, keys, input_ids, positions, meta)
        graph.replay()
        return graph.logits.index_select(0, logits_rows)

    def _fill(self, g: _Graph, b: int, keys: int, input_ids: torch.Tensor, positions: torch.Tensor,
              meta: AttentionMetadata) -> None:
        assert meta.decode_slots is not None and meta.decode_mask is not None
        self._pad(g)
        g.ids[:b].copy_(input_ids, non_blocking=True)
        g.positions[:b].copy_(positions, non_blocking=True)
        g.slot_mapping[:b].copy_(meta.slot_mapping, non_blocking=True)
        g.slots[:b, :keys].copy_(meta.decode_slots, non_blocking=True)
        g.mask[:b, :, :, :keys].copy_(meta.decode_mask, non_blocking=True)

    def _pad(self, g: _Graph) -> None:
        """Every row a padding row: token 0 at position 0, its K/V written to and read from the scratch slot only."""
        g.ids.zero_()
        g.positions.zero_()
        g.slot_mapping.fill_(self.scratch)
        g.slots.fill_(self.scratch)
        g.mask.zero_()
        g.mask[:, :, :, 0] = True  # one real key per row: no row is all masked (that softmax would be NaN)

    def _record(self, rows: int, keys: int) -> _Graph:
        dev = self.device
        g = _Graph(ids=torch.zeros(rows, dtype=torch.long, device=dev),
                   positions=torch.zeros(rows, dtype=torch.long, device=dev),
                   slot_mapping=torch.zeros(rows, dtype=torch.long, device=dev),
                   slots=torch.zeros(rows, keys, dtype=torch.long, device=dev),
                   mask=torch.zeros(rows, 1, 1, keys, dtype=torch.bool, device=dev),
                   every_row=torch.arange(rows, device=dev), logits=torch.empty(0), replay=lambda: None)
        self._pad(g)  # capturing runs the model once: on padding rows, so only the scratch slot is written
        meta = AttentionMetadata(slot_mapping=g.slot_mapping, prefills=[], decode_start=0, decode_slots=g.slots,
                                 decode_mask=g.mask)
        # Every tensor the graph reads is held by `g` for the graph's life: a graph replays raw addresses, and a
        # tensor freed after capture (an index made here, say) would hand its memory to others under it.
        g.logits, g.replay = self._capture(
            lambda: self.model.forward(g.ids, g.positions, self.kv_cache, meta, g.every_row))
        return g

    def _cuda_capture(self, call: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, Callable[[], None]]:
        side = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # a warm-up run first: cuBLAS handles and workspaces exist before capture
            call()
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = call()
        return out, graph.replay
