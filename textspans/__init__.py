"""Domain text helpers shared by the gateway, the jobs and the benchmarks: spans and sentences of a source
text, grounded schemas (string fields whose values must be spans of the source) and a schema's fields
described as prompt lines. Pure Python on str and dict, below gateway and jobs; the engine only compiles
the grammars built from them (engine/structured.py)."""
from textspans.schema import GROUNDED, describe_fields, grounded_schema
from textspans.spans import is_grounded, sentence_spans, text_spans

__all__ = ["GROUNDED", "describe_fields", "grounded_schema", "is_grounded", "sentence_spans", "text_spans"]
