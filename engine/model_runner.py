"""Turns a SchedulerOutput into tensors, runs the model, samples.

Owns the device, the model weights and the KV pool. The pool is one tensor
[layers, 2 (K, V), num_blocks x block_size, kv_heads, head_dim]; its size is what the
KV formula predicts, to the byte.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import structlog
import torch

from engine import execution_path
from engine.config import DTYPE_BYTES, EngineConfig, KVCacheSpec
from engine.kv_dtypes import KV_DTYPES
from engine.model import cpu_kernels, hugepages, prefill_weights
from engine.model.attention import AttentionMetadata, PrefillMeta
from engine.model.config import ModelConfig
from engine.model.cpu_kernels import native_decode_for
from engine.model.cuda_graphs import DecodeGraphs
from engine.model.loader import TORCH_DTYPES, load_model
from engine.model.native_step import NativeDecoder
from engine.outputs import RunnerOutput, ScheduledSeq, SchedulerOutput
from engine.sampler import SamplingRow, sample
from engine.slot_rows import SlotRows

log = structlog.get_logger(__name__)


class ModelRunner:
    def __init__(self, config: EngineConfig, *, native_prefill_context: int | None = None):
        """`native_prefill_context`: a benchmark's forced prefill limit (engine/execution_path.py); None: the
        kernel ISA's."""
        self.config = config
        self.device = torch.device(config.device)
        self.dtype = TORCH_DTYPES[config.resolved_dtype]
        self.kv_dtype = TORCH_DTYPES[config.resolved_kv_dtype]
        if self.device.type == "cpu" and config.num_threads:
            torch.set_num_threads(config.num_threads)
        cpu_kernels.configure(enabled=config.native_kernels, isa=config.kernel_isa)  # before any weight is packed
        self.model, self.model_config = load_model(
            config.model, self.device, self.dtype, config.weights, dtype_explicit=config.dtype != "auto",
            max_positions=config.max_model_len,
        )
        mc: ModelConfig = self.model_config
        self.kv_spec = KVCacheSpec(
            num_layers=mc.num_layers,
            num_kv_heads=mc.num_kv_heads,
            head_dim=mc.head_dim,
            dtype_bytes=DTYPE_BYTES[config.resolved_kv_dtype],
            block_size=config.block_size,
        )
        self.num_blocks = config.num_blocks_override or self.kv_spec.num_blocks_for(config.kv_cache_memory_bytes)
        if self.num_blocks < 1:
            raise ValueError(f"KV budget {config.kv_cache_memory_bytes} B holds no block of {self.kv_spec.bytes_per_block} B")
        slots = self.num_blocks * config.block_size
        # The native decode kernel serves fp32 compute over an fp32/bf16/fp16 pool on CPU; other
        # dtypes and CUDA use gather + SDPA.
        self.native_decode = native_decode_for(self.device, self.dtype, self.kv_dtype)
        # CUDA graphs replay decode steps padded to shape buckets; padding rows write one slot past the pool's
        self.scratch_slots = 1 if self.device.type == "cuda" and config.cuda_graphs else 0
        kv_shape = (mc.num_layers, 2, slots + self.scratch_slots, mc.num_kv_heads, mc.head_dim)
        # on CPU the pool is on huge pages (engine/model/hugepages.py): decode attention reads it scattered by block
        self.kv_cache = (hugepages.zeros(kv_shape, self.kv_dtype) if self.device.type == "cpu"
                         else torch.zeros(kv_shape, dtype=self.kv_dtype, device=self.device))
        self.decode_graphs = (DecodeGraphs(self.model, self.kv_cache, scratch_slot=slots,
                                           max_keys=mc.max_position_embeddings) if self.scratch_slots else None)
        self.native_step, why_not = self._native_step()
        self.path = execution_path.choose(why_not_native=why_not, isa=cpu_kernels.kernel_isa(),
                                          batch_invariant=config.batch_invariant,
                                          prefill_context=native_prefill_context)
        log.info("execution_path", native=self.path.native, prefill_mean_context=self.path.prefill_limit,
                 reason=self.path.reason)
        self.slot_rows = SlotRows(config.block_size)  # decode steps' key slots, kept across steps
        self.prefill_weights = prefill_weights.apply(self.model, config.prefill_weights,
                                                     batch_invariant=config.batch_invariant)
        log.info("prefill_weights", mode=self.prefill_weights.mode, reason=self.prefill_weights.reason,
                 cached_mb=round(self.prefill_weights.cached_bytes / 2**20, 1))
        if config.batch_invariant and self.native_step is None:
            raise ValueError(f"batch_invariant needs the fused native step, which cannot serve this engine: {why_not}")

    def _native_step(self) -> tuple[NativeDecoder | None, str | None]:
        """The fused native step when this model and pool can use it (engine/model/native_step.py), else why not."""
        if not self.native_decode:
            return None, "the native kernels are off or not built, or the K/V dtype is not one they read"
        why = NativeDecoder.eligible(self.model)
        if why is not None:
            return None, why
        lib = cpu_kernels._library()
        assert lib is not None  # native_decode implies a loaded library
        threads = self.config.num_threads or torch.get_num_threads()
        step = NativeDecoder(lib, self.model, threads)
        log.info("native_decode_step", max_threads=threads, isa=cpu_kernels.kernel_isa(),
                 weights_on_huge_pages_mb=round(step.hugepage_bytes / 2**20, 1))
        return step, None

    @property
    def kv_cache_bytes(self) -> int:
        """The block pool's bytes (the CUDA graphs' scratch slot past it is not part of the pool)."""
        slots = self.kv_cache.shape[2]
        return self.kv_cache.numel() // slots * (slots - self.scratch_slots) * self.kv_cache.element_size()

    def tokens_by_kv_dtype(self) -> dict[str, int]:
        """KV tokens this budget holds per pool precision (the start-up log shows what --kv-dtype buys)."""
        if self.config.num_blocks_override:
            return {}
        out: dict[str, int] = {}
        for name in KV_DTYPES:
            spec = dataclasses.replace(self.kv_spec, dtype_bytes=DTYPE_BYTES[name])
            out[name] = spec.num_blocks_for(self.config.kv_cache_memory_bytes) * self.config.block_size
        return out

    def run(self, out: SchedulerOutput, rows: dict[str, SamplingRow],
            before_compute: Callable[[], None] | None = None) -> RunnerOutput:
        """Computes every scheduled token; samples a token for each seq that samples and has a row.

        `out.seqs` arrive in SchedulerOutput's batch order (prefill chunks, then one-token seqs).
        Raises only for a failure of the whole step; a row that cannot be sampled is in `errors`.
        `before_compute` runs once the tensors are built, just before the model (LLMEngine.step): on the native
        paths, right before the native call itself.
        """
        input_ids, positions, meta, logits_rows, sampled_ids = self._prepare(out.seqs)
        route = self.path.route(meta)  # a pure function of the step's shape and the load-time path
        with torch.inference_mode():  # the sampler edits the logits in place
            if route == "native_decode":
                assert self.native_step is not None
                # decode only: the same fs_forward rows as forward() below (so also with batch invariance), without
                # its per-step table building; before_compute runs just before the native call (GIL released)
                logits = self.native_step.decode(input_ids, positions, self.kv_cache, meta, before_compute)  # [T, V]
                if logits_rows.numel() != logits.shape[0]:
                    logits = logits.index_select(0, logits_rows)
            elif route == "native":
                assert self.native_step is not None
                logits = self.native_step.forward(input_ids, positions, self.kv_cache, meta, logits_rows,
                                                  before_compute)  # [R, V]
            else:
                if before_compute is not None:
                    before_compute()
                graphed = (None if self.decode_graphs is None  # None: not a step the CUDA graphs serve
                           else self.decode_graphs.run(input_ids, positions, meta, logits_rows))
                logits = graphed if graphed is not None else self.model.forward(
                    input_ids, positions, self.kv_cache, meta, logits_rows)  # [R, V]
            keep = [i for i, rid in enumerate(sampled_ids) if rid in rows]  # a failed request has no row
            if not keep:
                return RunnerOutput()
            if len(keep) < len(sampled_ids):
                logits = logits[keep]
            ids = [sampled_ids[i] for i in keep]
            sampled = sample(logits, [rows[rid] for rid in ids])
        return RunnerOutput(
            tokens={rid: t for rid, t in zip(ids, sampled.tokens, strict=True) if t is not None},
            errors={ids[i]: e for i, e in sampled.errors.items()},
            logprobs={ids[i]: lp for i, lp in sampled.logprobs.items()},
        )

    def _slots(self, block_ids: list[int], start: int, end: int) -> torch.Tensor:
        bs = self.config.block_size
        pos = torch.arange(start, end)
        table = torch.tensor(block_ids, dtype=torch.long)
        return table[pos // bs] * bs + pos % bs

    def _prepare(
        self, seqs: list[ScheduledSeq]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor, list[str]]:
        """Flat-batch tensors, rows in `seqs` order (SchedulerOutput's: prefill chunks, then one-token seqs)."""
        if self.native_decode and all(s.num_new_tokens == 1 for s in seqs):
            prepared = self._prepare_native_decode(seqs)
        else:
            prepared = self._prepare_general(seqs)
        if self.model.rope.long_from is not None:  # longrope: rows by each sequence's length (rope.py)
            lens = torch.tensor([s.request.num_tokens for s in seqs], dtype=torch.long)
            counts = torch.tensor([s.num_new_tokens for s in seqs], dtype=torch.long)
            positions = prepared[1].cpu()
            rows = self.model.rope.rows_for(positions, torch.repeat_interleave(lens, counts))
            prepared[2].rope_rows = None if rows is None else rows.to(self.device)
        return prepared

    def _prepare_general(
        self, seqs: list[ScheduledSeq]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor, list[str]]:
        ids: list[int] = []
        pos_parts: list[torch.Tensor] = []
        slot_parts: list[torch.Tensor] = []
        prefills: list[PrefillMeta] = []
        decodes: list[ScheduledSeq] = []
        logits_rows: list[int] = []
        sampled_ids: list[str] = []
        row = 0
        for s in seqs:
            req, n = s.request, s.num_new_tokens
            if s.end_pos <= req.num_prompt_tokens:
                ids.extend(req.prompt_token_ids[s.start_pos : s.end_pos])
            else:
                ids.extend(req.token_id_at(p) for p in range(s.start_pos, s.end_pos))
            if n > 1:
                chunk, new_slots = self._prefill_meta(s, row)
                prefills.append(chunk)
                pos_parts.append(torch.arange(s.start_pos, s.end_pos))
                slot_parts.append(new_slots)
            else:
                decodes.append(s)
            row += n
            if s.samples:
                logits_rows.append(row - 1)
                sampled_ids.append(req.request_id)
        decode_slots, decode_mask, decode_ctx = self._decode_meta(decodes, pos_parts, slot_parts)
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=torch.cat(slot_parts).to(dev),
            prefills=prefills,
            decode_start=row - len(decodes),
            decode_slots=decode_slots,
            decode_mask=decode_mask,
            decode_ctx=decode_ctx,
            native_decode=self.native_decode and decode_slots is not None,
        )
        return (
            torch.tensor(ids, dtype=torch.long, device=dev),
            torch.cat(pos_parts).to(dev),
            meta,
            torch.tensor(logits_rows, dtype=torch.long, device=dev),
            sampled_ids,
        )

    def _prepare_native_decode(
        self, seqs: list[ScheduledSeq]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor, list[str]]:
        """_prepare for a batch of one-token seqs on the native decode path: the same tensors, from the kept slot
        rows (engine/slot_rows.py) and plain lists (the general path's torch calls cost more than the step's
        arithmetic at batch 1)."""
        slots, ctx, last = self.slot_rows.table(seqs)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(last, dtype=torch.int64),
            prefills=[],
            decode_start=0,
            decode_slots=torch.from_numpy(slots),
            decode_mask=None,
            decode_ctx=torch.from_numpy(ctx),
            native_decode=True,
        )
        ids = [s.request.token_id_at(s.start_pos) for s in seqs]
        sampled = [i for i, s in enumerate(seqs) if s.samples]
        return (
            torch.tensor(ids, dtype=torch.long),
            torch.from_numpy(ctx - 1),  # each decode token sits at its sequence's last position
            meta,
            torch.tensor(sampled, dtype=torch.long),
            [seqs[i].request.request_id for i in sampled],
        )

    def _prefill_meta(self, s: ScheduledSeq, row: int) -> tuple[PrefillMeta, torch.Tensor]:
        """The chunk's attention metadata and the slots its new tokens' K/V go to."""
        n = s.num_new_tokens
        if s.start_pos == 0:
            return PrefillMeta(row, row + n, None, None), self._slots(s.block_ids, 0, n)
        ctx = s.end_pos
        key_slots = self._slots(s.block_ids, 0, ctx)
        mask = torch.arange(ctx)[None, :] <= torch.arange(s.start_pos, ctx)[:, None]  # [n, ctx]
        meta = PrefillMeta(row, row + n, key_slots.to(self.device), mask.to(self.device))
        return meta, key_slots[s.start_pos :]

    def _decode_meta(
        self, decodes: list[ScheduledSeq], pos_parts: list[torch.Tensor], slot_parts: list[torch.Tensor]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """Key slots of every decode sequence; appends the decode tokens' positions and slots."""
        if not decodes:
            return None, None, None
        slots_np, ctx_np, last = self.slot_rows.table(decodes)
        slots, ctx = torch.from_numpy(slots_np), torch.from_numpy(ctx_np)
        pos_parts.append(ctx - 1)  # each decode token sits at its sequence's last position
        slot_parts.append(torch.tensor(last, dtype=torch.int64))
        if self.native_decode:
            return slots, None, ctx
        pos = torch.arange(slots.shape[1])
        mask = (pos[None, :] < ctx[:, None])[:, None, None, :]  # [Bd, 1, 1, Lmax]
        return slots.to(self.device), mask.to(self.device), None
