"""Prompt-lookup speculative decoding: drafts copied from a request's own prompt and output, verified in one step.

- draft.py: `Draft`, the tokens proposed after a request's known tokens (forced ones marked);
- ngram.py: the request's n-gram index (built once, extended by each step's tokens);
- proposer.py: one request's drafts under its class's policy and its grammar (no torch);
- verify.py: the acceptance rule over the step's rows (greedy: identical output; sampling: same distribution).

Where the pieces act: the engine drafts before each schedule (engine/engine.py); the scheduler schedules a draft
as part of its request's decode chunk under the token budget, never preempting for it, and takes the accepted
tokens in order, stop conditions included (engine/sched/scheduler.py); the KV cache frees the blocks that held only
rejected positions (engine/kv_cache/manager.py `trim`); the model runner returns a row per chunk position and
verifies (engine/model_runner.py).
"""
