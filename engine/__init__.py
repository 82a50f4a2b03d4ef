"""finserve's inference engine: paged KV cache, continuous batching, class-aware scheduling.

Imports no web, queue or database library, and changes nothing process-wide on import: no OpenMP
variables (the fused decode step runs on the kernel library's own thread pool, which spins briefly and
then parks; engine/model/native_step.py), so a process that imports the engine, and every child it starts,
keeps the environment it was given.
"""
