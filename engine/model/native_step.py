"""The fused native step (engine/model/kernels/step.c, fs_forward) and the choice of its thread count.

A model whose matmuls are all quantized (int8 / q4) runs every layer of a step in one native call: no per-op
Python or torch dispatch, the kernel library's own thread pool. Which steps take it is engine/execution_path.py's
decision; the torch model (engine/model/llama.py) stays the reference the tests compare it against.

Threads: the best count depends on what else runs on the machine (a busy core shared with a second thread).
Calls of up to 8 tokens lend their heavy phases (kernels/lend.c: the caller never waits for a descheduled helper);
larger calls wait for every task. `ThreadGovernor` measures instead of guessing: the median of the last few step
times per thread count and bucket of steps, the fastest used, the others re-tried now and then.
"""
from __future__ import annotations

import ctypes
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
import torch

from engine.model import cpu_kernels, hugepages, kernel_abi
from engine.model.attention import AttentionMetadata
from engine.model.cpu_kernels import KV_TYPES
from engine.model.kernel_abi import Batch, Layer, ModelDesc, QMat
from engine.model.quant import QuantizedLinear

log = structlog.get_logger(__name__)


def _bucket(b: int, keys: int = 0) -> int:
    """Steps of alike cost: by batch size and by the keys a token attends to on average (deep context costs a
    multiple of shallow, so their times must not share one statistic)."""
    size = 0 if b == 1 else 1 if b <= 4 else 2 if b <= 16 else 3
    depth = keys // max(1, b)
    return 4 * size + (0 if depth < 512 else 1 if depth < 1536 else 2 if depth < 3072 else 3)


@dataclass
class ThreadGovernor:
    """Chooses the thread count of each step from measured step times (per bucket of batch size and context).

    Each (bucket, thread count) keeps its last `window` step times and is judged by their median: one slow step
    (a page fault, the VM stealing the core) does not move it, a lasting change (a CPU hog on another core) does
    after window // 2 + 1 steps. A moving average moved on single outliers and kept the slower count until the
    next re-tries."""

    max_threads: int
    explore_every: int = 64  # steps between re-tries of a thread count that is not the best
    soon_every: int = 8  # ... and of one that is unmeasured, thin or promising (below)
    window: int = 5  # step times kept per (bucket, thread count)
    _recent: dict[tuple[int, int], deque[float]] = field(default_factory=dict)
    _median: dict[tuple[int, int], float] = field(default_factory=dict)  # of _recent, updated by record()
    _steps: dict[int, int] = field(default_factory=dict)
    _best: dict[int, int] = field(default_factory=dict)  # per bucket: its best thread count when last picked
    _latest: int | None = None  # the best count of the last step whose bucket had every count measured

    @property
    def candidates(self) -> tuple[int, ...]:
        return (1,) if self.max_threads <= 1 else (1, self.max_threads)

    def pick(self, batch: int, keys: int = 0) -> int:
        bucket = _bucket(batch, keys)
        n = self._steps.get(bucket, 0)
        self._steps[bucket] = n + 1
        unmeasured = [c for c in self.candidates if (bucket, c) not in self._median]
        if unmeasured:
            # a bucket missing a count (new, or its samples dropped by _machine_changed) runs the count the freshest
            # fully measured bucket prefers and measures the other every soon_every steps: a rare prefill bucket's
            # exploration costs a whole prompt
            guess = self._latest
            if guess in unmeasured:
                return guess
            if guess is None or n % self.soon_every == self.soon_every - 1:
                return unmeasured[0]
            return guess
        best = min(self.candidates, key=lambda c: self._median[(bucket, c)])
        self._latest = best
        if self._best.setdefault(bucket, best) != best:
            self._best[bucket] = best
            self._machine_changed(bucket, best)
        others = [c for c in self.candidates if c != best]
        # now and then, measure another again; every soon_every steps one with less than a majority of its window
        # (its first sample may have been cold), or whose last step beat the best's median (its load may be gone)
        soon = [c for c in others if len(self._recent[(bucket, c)]) <= self.window // 2
                or self._recent[(bucket, c)][-1] < self._median[(bucket, best)]]
        every = self.soon_every if soon else self.explore_every
        if others and n % every == every - 1:
            pool = soon or others
            return pool[(n // every) % len(pool)]
        return best

    def _machine_changed(self, bucket: int, best: int) -> None:
        """`best` just became the faster count in `bucket` (a load came or went): the buckets that still prefer another
        drop its samples (from before the change) and measure it afresh at their next step (rare prefill buckets
        otherwise kept the old choice for long)."""
        for other, prev in self._best.items():
            if other != bucket and prev != best:
                self._recent.pop((other, best), None)
                self._median.pop((other, best), None)

    def record(self, batch: int, threads: int, seconds: float, keys: int = 0) -> None:
        key = (_bucket(batch, keys), threads)
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque(maxlen=self.window)
        recent.append(seconds)
        self._median[key] = statistics.median(recent)  # once per step here, not per comparison in pick()

    def snapshot(self) -> dict[str, float]:
        """Median step ms of the recent steps per 'bucket/threads' (for logs and benchmarks)."""
        return {f"{b}/{t}": round(v * 1e3, 3) for (b, t), v in sorted(self._median.items())}


class NativeDecoder:
    """Holds the kernel's model handle (raw pointers into the torch model's tensors, which it keeps alive)."""

    def __init__(self, lib: ctypes.CDLL, model: object, threads: int):
        from engine.model.llama import LlamaModel  # llama.py builds this; imported here to avoid a cycle

        assert isinstance(model, LlamaModel)
        cfg = model.cfg
        self.lib = lib
        self.model = model
        self.governor = ThreadGovernor(max(1, threads))
        first = model.layers[0].qkv
        assert isinstance(first, QuantizedLinear) and isinstance(model.lm_head, QuantizedLinear)
        head = model.lm_head
        lins = [[layer.qkv, layer.o_proj, layer.gate_up, layer.down] for layer in model.layers]
        read: list[torch.Tensor | None] = []  # what the kernel reads, layer by layer, then the head and RoPE tables
        for layer, mats in zip(model.layers, lins, strict=True):
            read += [layer.input_norm, layer.post_norm]
            for lin in mats:
                assert isinstance(lin, QuantizedLinear)
                read += [lin.weight.packed, lin.weight.scales, lin.weight.mins, lin.bias]
        hw = head.weight
        read += [model.norm, hw.packed, hw.scales, hw.mins, model.rope.cos, model.rope.sin]
        # every weight a step streams, on huge pages (engine/model/hugepages.py); the torch model's tensors are moved,
        # not copied, so the torch path and the embedding lookup read the same memory
        self.hugepage_bytes = hugepages.move_to_arena([t for t in read if t is not None])
        self._keep: list[torch.Tensor] = []  # every tensor whose pointer the kernel holds
        # the K/V pool of the last step: a helper late in a lent attention task (kernels/lend.c) may still read it
        # after the step returned, so it is not let go before the kernel says no helper is inside one
        self._kv: torch.Tensor | None = None
        self._layers = (Layer * cfg.num_layers)()
        for i, (layer, mats) in enumerate(zip(model.layers, lins, strict=True)):
            qkv, o, gate_up, down = (self._mat(lin) for lin in mats)
            self._layers[i] = Layer(attn_norm=self._ptr(layer.input_norm), ffn_norm=self._ptr(layer.post_norm),
                                    qkv=qkv, o=o, gate_up=gate_up, down=down)
        self._desc = ModelDesc(
            n_layers=cfg.num_layers, hidden=cfg.hidden_size, n_heads=cfg.num_heads, n_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim, ffn=cfg.intermediate_size, vocab=hw.n, act16=int(first.act16),
            eps=cfg.rms_norm_eps, **kernel_abi.llama_scalars(cfg.head_dim),
            layers=ctypes.cast(self._layers, ctypes.POINTER(Layer)), final_norm=self._ptr(model.norm),
            head=self._mat(head), rope_cos=self._ptr(model.rope.cos), rope_sin=self._ptr(model.rope.sin),
            rope_rows=int(model.rope.cos.shape[0]))
        self.vocab = hw.n
        self.max_batch = int(lib.fs_max_batch())  # tokens per native call (the kernel's tile buffers); more are split
        handle = ctypes.c_void_p()
        kernel_abi.raise_for(lib.fs_model_new(ctypes.byref(self._desc), ctypes.byref(handle)), "the native step's model")
        self.handle = handle.value

    def _mat(self, lin: object) -> QMat:
        assert isinstance(lin, QuantizedLinear)
        qw = lin.weight
        return QMat(w=self._ptr(qw.packed), wd=self._ptr(qw.scales), wm=None if qw.mins is None else self._ptr(qw.mins),
                    bias=None if lin.bias is None else self._ptr(lin.bias), n=qw.n, k=qw.k, format=int(qw.kernel))

    def _ptr(self, t: torch.Tensor) -> int:
        assert t.dtype in (torch.float32, torch.float16, torch.uint8) and t.is_contiguous() and t.device.type == "cpu"
        self._keep.append(t)
        return int(t.data_ptr())

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self.lib.fs_model_free(handle)

    @staticmethod
    def eligible(model: object) -> str | None:
        """Why the native step cannot serve this model (None when it can)."""
        from engine.model.families import native_unsupported
        from engine.model.llama import LlamaModel

        assert isinstance(model, LlamaModel)
        cfg = model.cfg
        lins = [lin for layer in model.layers for lin in (layer.qkv, layer.o_proj, layer.gate_up, layer.down)]
        unsupported = native_unsupported(cfg)  # a family feature the fused step does not implement
        if unsupported is not None:
            return unsupported
        if model.device.type != "cpu" or model.dtype != torch.float32:
            return "the native step runs fp32 compute on CPU"
        if not all(isinstance(lin, QuantizedLinear) and lin.lib is not None for lin in lins + [model.lm_head]):
            return "dense (or non-native) weights: the native step takes int8 / q4 matmuls"
        kinds = {lin.weight.kind for lin in lins if isinstance(lin, QuantizedLinear)}
        acts = {lin.act16 for lin in lins + [model.lm_head] if isinstance(lin, QuantizedLinear)}
        if len(kinds) != 1 or len(acts) != 1:
            return "mixed weight formats across layers"
        if cfg.intermediate_size % 16 or cfg.head_dim % 2 or cfg.head_dim > 512 or cfg.num_heads % cfg.num_kv_heads \
                or cfg.num_heads // cfg.num_kv_heads > 8:
            return ("a shape the fused kernel does not take (FFN width not a multiple of 16, head_dim odd or > 512, "
                    "more than 8 query heads per KV head)")
        return None

    def decode(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: torch.Tensor,
               meta: AttentionMetadata, before: Callable[[], None] | None = None
               ) -> torch.Tensor:  # [B] decode tokens -> logits [B, V] fp32
        """`before` runs right before the native call (ModelRunner.run's before_compute)."""
        assert meta.decode_slots is not None and meta.decode_ctx is not None and meta.decode_start == 0
        return self._run(input_ids, positions, kv_cache, meta.slot_mapping, meta.decode_slots, None,
                         meta.decode_ctx, None, before)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: torch.Tensor,
                meta: AttentionMetadata, logits_rows: torch.Tensor,
                before: Callable[[], None] | None = None) -> torch.Tensor:  # -> logits [R, V] fp32
        """Any batch (prefill chunks and decode tokens) through the native step: every token computed by the same
        per-row arithmetic (fs_forward), so a token's K/V and logits are the same bits whatever else is in the batch
        and however its prompt was chunked."""
        t = int(input_ids.shape[0])
        ctx = positions + 1  # a prefill token attends to keys 0..its position
        tables: list[torch.Tensor] = []
        slot_row = torch.empty(t, dtype=torch.int64)
        for p in meta.prefills:
            keys = p.key_slots if p.key_slots is not None else meta.slot_mapping[p.q_start : p.q_end]
            slot_row[p.q_start : p.q_end] = len(tables)
            tables.append(keys.to(torch.int64))
        if meta.decode_slots is not None:
            assert meta.decode_ctx is not None  # the native path's decode metadata
            nd = int(meta.decode_slots.shape[0])
            slot_row[meta.decode_start :] = torch.arange(len(tables), len(tables) + nd)
            ctx[meta.decode_start :] = meta.decode_ctx
        lmax = max([int(x.shape[0]) for x in tables] + ([int(meta.decode_slots.shape[1])]
                                                         if meta.decode_slots is not None else []))
        table = torch.zeros((len(tables) + (0 if meta.decode_slots is None else int(meta.decode_slots.shape[0])),
                             lmax), dtype=torch.int64)
        for i, keys in enumerate(tables):
            table[i, : keys.shape[0]] = keys
        if meta.decode_slots is not None:
            table[len(tables) :, : meta.decode_slots.shape[1]] = meta.decode_slots
        return self._run(input_ids, positions, kv_cache, meta.slot_mapping, table, slot_row, ctx, logits_rows, before)

    def _embed(self, input_ids: torch.Tensor) -> torch.Tensor:  # [B] -> [B, hidden] fp32
        """The step's embeddings; a tied table (the quantized LM head) read by the kernel library: embed_tokens'
        values in one native call instead of ~10 torch calls."""
        head = self.model.lm_head
        if self.model.embed is None and isinstance(head, QuantizedLinear):
            hw = head.weight
            return cpu_kernels.dequant_rows(self.lib, hw.kernel, hw.packed, hw.scales, hw.mins, hw.k,
                                            input_ids.to(torch.int64).contiguous())
        return self.model.embed_tokens(input_ids).float().contiguous()

    def _run(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
             table: torch.Tensor, slot_row: torch.Tensor | None, ctx: torch.Tensor,
             logits_rows: torch.Tensor | None, before: Callable[[], None] | None = None) -> torch.Tensor:
        b = int(input_ids.shape[0])
        x = self._embed(input_ids)
        pos = positions.to(torch.int64).contiguous()
        slot = slot_mapping.to(torch.int64).contiguous()
        slots = table.contiguous()
        ctx = ctx.to(torch.int64).contiguous()
        rows = None if logits_rows is None else logits_rows.to(torch.int64).contiguous()
        if rows is not None and rows.numel() > 1 and not bool((rows[1:] > rows[:-1]).all()):
            raise ValueError("logits rows must be increasing")
        logits = torch.empty((b if rows is None else int(rows.numel()), self.vocab), dtype=torch.float32)
        kv_type = KV_TYPES[kv_cache.dtype]
        if self._kv is None or self._kv.data_ptr() != kv_cache.data_ptr():
            if self._kv is not None:
                self.lib.fs_quiesce()
            self._kv = kv_cache
        keys = int(ctx.sum())  # the keys the batch's tokens attend to: the step's cost grows with them
        threads = self.governor.pick(b, keys)
        if before is not None:
            before()
        t0 = time.perf_counter()
        done = 0  # logits rows written so far
        call = Batch(kv_type=kv_type, kv=kv_cache.data_ptr(), kv_slots=int(kv_cache.shape[2]), threads=threads,
                     slots_stride=int(slots.shape[1]), logits=logits.data_ptr())
        for s in range(0, b, self.max_batch):
            e = min(b, s + self.max_batch)
            if rows is None:
                n, out_rows, out_ptr = e - s, None, logits[s].data_ptr()
            else:
                mine = rows[(rows >= s) & (rows < e)] - s
                n, out_rows = int(mine.numel()), mine.contiguous()
                out_ptr = logits[done].data_ptr() if n else logits.data_ptr()
            call.n_tokens, call.n_logits, call.x, call.pos = e - s, n, x[s].data_ptr(), pos[s].data_ptr()
            call.slot, call.ctx = slot[s].data_ptr(), ctx[s].data_ptr()
            call.slots = slots[s].data_ptr() if slot_row is None else slots.data_ptr()  # slot_row indexes the table
            call.slot_row = None if slot_row is None else slot_row[s].data_ptr()
            call.logit_rows = None if out_rows is None else out_rows.data_ptr()
            call.logits = out_ptr
            kernel_abi.raise_for(self.lib.fs_forward(self.handle, ctypes.byref(call)), "the native step")
            done += n
        self.governor.record(b, threads, time.perf_counter() - t0, keys)
        return logits
