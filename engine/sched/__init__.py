"""The scheduler and its helpers (no torch): what runs each step, admission, per-step token allowances, preemption,
the class queues, stop checks and the prefill cost model."""
