"""finserve's inference engine: paged KV cache, continuous batching, class-aware scheduling.

Imports no web, queue or database library.
"""
