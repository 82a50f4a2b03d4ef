"""Schema-constrained decoding: a JSON Schema becomes a per-step mask over the vocabulary (llguidance).

`compile_json_schema(tokenizer, schema_json)` validates the schema and compiles it into a
grammar once per (tokenizer, schema text); every request that decodes under that schema gets
its own `GrammarState` from `CompiledGrammar.new_state()`. Each step the sampler asks the state
for `allowed_mask(vocab_size)` (True = the token keeps the output a valid prefix of some
document the schema accepts), samples, and feeds the token back with `accept`; tokens the grammar
forces next (`forced_tokens`) are appended without sampling (jump-forward). When the
document is complete `is_terminated()` turns True and the engine stops the request ("stop").

The JSON is compact (no optional whitespace): it saves tokens, and a model that likes spaces
can never spend its whole budget on them inside an otherwise finished object.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jsonschema
import llguidance
import llguidance.torch as llg_torch
import tokenizers
import torch

from engine.jsondepth import MAX_SCHEMA_DEPTH, json_depth
from engine.outputs import UnwritableOutput
from engine.request import SamplingParams

if TYPE_CHECKING:
    from engine.tokenizer import Tokenizer

# Defaults for llguidance's JSON compiler; a schema may still override them via "x-guidance".
_JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False}
_BIT_SHIFTS = torch.arange(32, dtype=torch.int32)  # unpacks one int32 word into 32 token bits
# llguidance's words for text no token of the vocabulary writes: its jump-forward tokens are not the forced
# bytes ("forced bytes: got ..."), or the parser would take more bytes but no token starts with them.
_UNWRITABLE_SIGNS = ("forced bytes", "NoExtensionBias")


def _backend(tokenizer: Tokenizer | tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    # llguidance needs the `tokenizers` object itself: it reads the vocabulary bytes from its JSON.
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return tokenizer
    return tokenizer.backend


def _eos_ids(tokenizer: Tokenizer | tokenizers.Tokenizer) -> list[int] | None:
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return None  # llguidance reads the EOS token from the tokenizer's own metadata
    return [tokenizer.eos_token_id]


@lru_cache(maxsize=4)
def _ll_tokenizer(tokenizer: Tokenizer | tokenizers.Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of the vocabulary (token bytes, EOS). Costs ~0.2 s, so once per tokenizer."""
    return llguidance.LLTokenizer(_backend(tokenizer).to_str(), eos_token=_eos_ids(tokenizer))


def writable(tokenizer: Tokenizer | tokenizers.Tokenizer, text: str, *, json_string: bool = True) -> bool:
    """True when the model can write `text` as the content of a JSON string (or as it is, `json_string=False`:
    a choice's literal), in ordinary tokens.

    Not so for a character whose UTF-8 bytes the vocabulary lacks (SmolLM2 has no single-byte token
    for 0xF1 or 0xF2, and its tokenizer drops them: U+40000..U+BFFFF cannot be written) or for a
    special token's text ("<|im_end|>" tokenizes to the special token). A grammar that forces such text (a `const` or the rest of an
    `enum` value) breaks llguidance's jump-forward: its forced tokens drop the missing bytes or hold
    the special token, and its own matcher refuses them ("forced bytes: got ..."). The check is
    llguidance's own tokenization of the text as JSON escapes it, so it agrees with what is forced. A raw
    control character may be unwritable too (SmolLM2 lacks 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D), its JSON
    escape never is.
    """
    ll = _ll_tokenizer(tokenizer)
    escaped = json.dumps(text, ensure_ascii=False)[1:-1] if json_string else text  # control chars: \uXXXX
    try:
        data = escaped.encode()
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 bytes at all
        return False
    tokens = ll.tokenize_bytes(data)
    return ll.decode_bytes(tokens) == data and not any(ll.is_special_token(t) for t in tokens)


def validate_json_schema(schema_json: str) -> tuple[dict[str, Any], str]:
    """Check a schema and build its grammar; returns (schema, llguidance grammar). No tokenizer needed.

    ValueError names the problem: not JSON, not an object, invalid against its JSON Schema
    meta-schema, or using a feature llguidance cannot enforce (e.g. an unknown "format").
    """
    try:
        schema = json.loads(schema_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"JSON schema is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError("JSON schema is nested too deeply to parse") from None
    if not isinstance(schema, dict):
        raise ValueError(f"JSON schema must be a JSON object, not {type(schema).__name__}")
    if json_depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise ValueError(f"JSON schema nests more than {MAX_SCHEMA_DEPTH} levels deep")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise ValueError(f"invalid JSON schema at {where}: {exc.message}") from None
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"unsupported JSON schema: {exc}") from None
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ValueError(f"unsupported JSON schema: {messages[0] if messages else 'rejected by llguidance'}")
    return schema, grammar


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """A validated schema compiled for one tokenizer. Immutable and shared between requests."""

    schema: dict[str, Any]  # the JSON schema; {} for a regex or choice grammar
    grammar: str  # llguidance's serialized grammar
    ll_tokenizer: llguidance.LLTokenizer

    def new_state(self) -> GrammarState:
        matcher = llguidance.LLMatcher(self.ll_tokenizer, self.grammar, log_level=0)
        return GrammarState(matcher, self.ll_tokenizer.vocab_size)


class GrammarState:
    """Where one request's output stands in the grammar. Used by one thread (the engine loop)."""

    def __init__(self, matcher: llguidance.LLMatcher, tokenizer_vocab: int) -> None:
        self._matcher = matcher
        self._tokenizer_vocab = tokenizer_vocab
        # [1, ceil(V_tok / 32)] int32 words; bit j of word i set = token 32*i + j allowed.
        self._bitmask = torch.full((1, (tokenizer_vocab + 31) // 32), -1, dtype=torch.int32)

    def allowed_mask(self, vocab_size: int) -> torch.Tensor:
        """Bool [vocab_size] on CPU. Ids past the tokenizer's vocabulary (padded embeddings) are never allowed.

        UnwritableOutput when what the grammar requires next is text no token of this vocabulary writes (a
        raw byte 0x04 after a choice, say): llguidance stops with "NoExtensionBias" and would allow only EOS,
        which would end the output short of the grammar.
        """
        llg_torch.fill_next_token_bitmask(self._matcher, self._bitmask, 0)
        self._raise_if_unwritable("no token of this model's vocabulary may come next")
        words = self._bitmask[0]  # [W]
        bits = ((words.unsqueeze(1) >> _BIT_SHIFTS) & 1).view(-1).bool()  # [W * 32]
        n = min(vocab_size, self._tokenizer_vocab)
        mask = torch.zeros(vocab_size, dtype=torch.bool)
        mask[:n] = bits[:n]
        return mask

    def accept(self, token_id: int) -> None:
        """Advance by one sampled token. A token outside the last mask is a caller bug: ValueError.

        UnwritableOutput when the text the grammar requires cannot be written: the mask allowed the first of
        the tokens llguidance made for it (a dropped byte, a special token), which its matcher then refuses
        ("forced bytes"), or the last mask allowed no token at all (checked here, off the per-step path).
        """
        if not self._matcher.consume_token(token_id):  # llguidance's reason, without its parser state dump
            what = f"token {token_id} is not allowed by the grammar"
            self._raise_if_unwritable(what)
            if not bool(self._bitmask[0].any()):
                raise UnwritableOutput(f"{what} (it allowed no token of this model's vocabulary): the text it "
                                       "requires cannot be written in this model's tokens")
            raise ValueError(f"{what}: {_reason(self._matcher.get_error())}")

    def accept_forced(self, tokens: list[int]) -> None:
        """Advance by jump-forward tokens (`forced_tokens`). llguidance makes them by tokenizing the forced
        text; text the vocabulary cannot write comes out as other tokens (a byte dropped, a special token),
        which its own matcher refuses ("forced bytes: ..."): UnwritableOutput, the client's grammar at fault."""
        for t in tokens:
            if not self._matcher.consume_token(t):
                raise UnwritableOutput(f"token {t} is not allowed by the grammar ({_reason(self._matcher.get_error())}"
                                       "): the text it forces cannot be written in this model's tokens")

    def _raise_if_unwritable(self, what: str) -> None:
        error = self._matcher.get_error() if self._matcher.is_error() else None
        if error is not None and any(sign in error for sign in _UNWRITABLE_SIGNS):
            raise UnwritableOutput(f"{what} ({_reason(error)}): the text the grammar requires cannot be written "
                                   "in this model's tokens")

    def fork(self) -> GrammarState:
        """An independent copy at the same point: a draft is cut and verified on one (engine/speculative/)."""
        return GrammarState(self._matcher.deep_copy(), self._tokenizer_vocab)

    def allows(self, token_id: int) -> bool:
        """Whether `token_id` may come next; the state does not move."""
        return bool(self._matcher.validate_tokens([token_id]) == 1)

    def forced_tokens(self) -> list[int]:
        """The tokens the grammar allows as the only continuation from here (jump-forward), not yet consumed.

        JSON keys, punctuation and the rest of an enum value once its prefix is unique: the model
        has no choice over them, so the engine appends them without sampling and computes them
        in one step. llguidance stops short of a token whose bytes a longer token could still
        extend, so the forced tokens are the ones a sampler would have had to pick.
        """
        if self._matcher.is_stopped() or self._matcher.is_error():
            return []
        return list(self._matcher.compute_ff_tokens())

    def is_terminated(self) -> bool:
        """True once the document is complete (or the matcher failed); no further token may follow."""
        return self._matcher.is_stopped()

    def is_accepting(self) -> bool:
        """True when the output so far is already a complete document (EOS would be allowed)."""
        return self._matcher.is_accepting()

    @property
    def error(self) -> str | None:
        return (self._matcher.get_error() or "grammar error") if self._matcher.is_error() else None


def compile_json_schema(tokenizer: Tokenizer | tokenizers.Tokenizer, schema_json: str) -> CompiledGrammar:
    """Validate and compile `schema_json` for `tokenizer`; cached by (tokenizer, schema text).

    Raises ValueError naming the problem when the text is not JSON, not a valid JSON Schema, or
    uses a feature llguidance cannot enforce (e.g. an unknown "format").
    """
    return _compile(tokenizer, schema_json)


@lru_cache(maxsize=256)
def _compile(tokenizer: Tokenizer | tokenizers.Tokenizer, schema_json: str) -> CompiledGrammar:
    schema, grammar = validate_json_schema(schema_json)
    return CompiledGrammar(schema=schema, grammar=grammar, ll_tokenizer=_ll_tokenizer(tokenizer))


# ---- regex and choice grammars (vLLM's guided_regex / guided_choice) ------------------------------


def _checked(grammar: str, what: str) -> str:
    """`grammar` if llguidance accepts it; ValueError naming `what` otherwise."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ValueError(f"unsupported {what}: {messages[0] if messages else 'rejected by llguidance'}")
    return grammar


def regex_grammar(pattern: str) -> str:
    """llguidance grammar whose documents are the strings fully matching `pattern` (Rust regex syntax)."""
    if not pattern:
        raise ValueError("regex must not be empty")
    return _checked(llguidance.LLMatcher.grammar_from_regex(pattern), "regex")


def choice_grammar(choices: tuple[str, ...]) -> str:
    """llguidance grammar whose documents are exactly the given strings (literals, never patterns)."""
    if not choices or not all(choices):
        raise ValueError("choice must be a non-empty list of non-empty strings")
    # JSON string syntax is a valid lark literal: quotes, backslashes and control characters escaped.
    alternatives = " | ".join(json.dumps(c) for c in dict.fromkeys(choices))
    return _checked(llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}"), "choice")


def compile_regex(tokenizer: Tokenizer | tokenizers.Tokenizer, pattern: str) -> CompiledGrammar:
    """Output constrained to match `pattern` as a whole; cached. ValueError on a pattern llguidance refuses."""
    return _compile_other(tokenizer, "regex", pattern)


def compile_choice(tokenizer: Tokenizer | tokenizers.Tokenizer, choices: tuple[str, ...]) -> CompiledGrammar:
    """Output constrained to exactly one of `choices`; cached. ValueError on an empty list or string."""
    return _compile_other(tokenizer, "choice", json.dumps(list(choices)))


@lru_cache(maxsize=256)
def _compile_other(tokenizer: Tokenizer | tokenizers.Tokenizer, kind: str, spec: str) -> CompiledGrammar:
    # `spec` is the regex itself or the JSON list of choices: hashable, so lru_cache can key on it.
    grammar = regex_grammar(spec) if kind == "regex" else choice_grammar(tuple(json.loads(spec)))
    return CompiledGrammar(schema={}, grammar=grammar, ll_tokenizer=_ll_tokenizer(tokenizer))


# ---- one request's constraint, compiled and probed before it is admitted ---------------------------
PROBE_TOKENS = 4  # allowed first tokens tried (first, last and two between): limits fire on any of them


def constraint_kind(p: SamplingParams) -> str | None:
    """"json_schema", "regex" or "choice": the output constraint `p` sets (None: free text)."""
    if p.regex is not None:
        return "regex"
    if p.choice is not None:
        return "choice"
    return "json_schema" if p.json_schema is not None else None


def compile_constraint(tokenizer: Tokenizer | tokenizers.Tokenizer, p: SamplingParams) -> CompiledGrammar | None:
    """The compiled grammar of `p`'s constraint (cached), None for free text; ValueError if unusable."""
    kind = constraint_kind(p)
    if kind == "regex":
        assert p.regex is not None
        return compile_regex(tokenizer, p.regex)
    if kind == "choice":
        assert p.choice is not None
        return compile_choice(tokenizer, p.choice)
    return None if p.json_schema is None else compile_json_schema(tokenizer, p.json_schema)


def check_constraint(tokenizer: Tokenizer | tokenizers.Tokenizer, p: SamplingParams) -> None:
    """Compile `p`'s constraint and probe its first step; ValueError with llguidance's reason if unusable.

    llguidance's size limits (ParserTooComplex for a recursive `$ref`, "too many expressions" for a
    regex like `(a{1000}){1000}`, a row of more than 2,000 items for 20,000 choices) fire when the
    first tokens are computed, not when the grammar is built. Probing here (the gateway calls it in
    a worker thread before the request is admitted) turns them into a client error instead of a
    request that fails inside the engine. The result is cached with the compiled grammar.
    """
    grammar = compile_constraint(tokenizer, p)
    if grammar is not None:
        problem = _probe(grammar) or _unwritable(tokenizer, constraint_kind(p), _spec(p))
        if problem is not None:
            raise ValueError(problem)


def _spec(p: SamplingParams) -> str:
    """The constraint's text, hashable for the cache: the regex, the JSON list of choices or the schema."""
    if p.regex is not None:
        return p.regex
    if p.choice is not None:
        return json.dumps(list(p.choice))
    return p.json_schema or ""


@lru_cache(maxsize=256)
def _unwritable(tokenizer: Tokenizer | tokenizers.Tokenizer, kind: str | None, spec: str) -> str | None:
    """Why the model cannot write a text the constraint forces verbatim (`writable`), or None. The literals
    checked: a choice's strings, a JSON schema's property names and const / enum values (a regex's are not)."""
    if kind == "choice":
        literals: Iterator[str] = iter(json.loads(spec))
    elif kind == "json_schema":
        literals = _schema_literals(json.loads(spec))
    else:
        return None
    for text in literals:
        if not writable(tokenizer, text, json_string=kind == "json_schema"):  # a choice is written as it is
            return f"{text[:80]!r} cannot be written in this model's tokens (a byte its vocabulary lacks, or a " \
                   "special token's text)"
    return None


def _schema_literals(node: Any) -> Iterator[str]:
    """Texts a JSON schema makes the output hold verbatim: property names, const and enum values (as JSON)."""
    if isinstance(node, list):
        for item in node:
            yield from _schema_literals(item)
    elif isinstance(node, dict):
        for key, sub in node.items():
            if key in ("const", "enum"):
                for value in [sub] if key == "const" else sub if isinstance(sub, list) else []:
                    yield value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            elif key == "properties" and isinstance(sub, dict):
                yield from sub
                yield from _schema_literals(list(sub.values()))
            else:
                yield from _schema_literals(sub)


@lru_cache(maxsize=256)
def _probe(grammar: CompiledGrammar) -> str | None:
    """Why the grammar cannot be decoded (llguidance's first error line), or None. Keyed by identity:
    the compiled grammar itself is cached by its text."""
    state = grammar.new_state()
    try:
        allowed = state.allowed_mask(grammar.ll_tokenizer.vocab_size).nonzero().flatten().tolist()
    except UnwritableOutput as exc:
        return str(exc)  # "... allows no token ... next": the first step needs text the model cannot write
    if state.error is not None:
        return _reason(state.error)
    if not allowed:
        return "the grammar allows no first token"
    picks = sorted({allowed[(len(allowed) - 1) * i // (PROBE_TOKENS - 1)] for i in range(PROBE_TOKENS)})
    for token in picks:
        trial = state._matcher.deep_copy()
        if not trial.consume_token(token) or trial.is_error():
            return _reason(trial.get_error())
        # The forced tokens that follow are taken too, as the engine's jump-forward takes them: text the
        # vocabulary cannot write (a regex literal, say; `writable`) is refused here, not in the engine.
        for forced in trial.compute_ff_tokens():
            if not trial.consume_token(forced):
                return f"the text it forces cannot be written in this model's tokens ({_reason(trial.get_error())})"
        if trial.is_error():
            return _reason(trial.get_error())
        try:  # and the step after them: a raw byte the vocabulary lacks is no forced token, but no token at all
            GrammarState(trial, grammar.ll_tokenizer.vocab_size).allowed_mask(grammar.ll_tokenizer.vocab_size)
        except UnwritableOutput as exc:
            return str(exc)
    return None


def _reason(error: str | None) -> str:
    """llguidance's message without the parser state dump that follows it."""
    text = (error or "rejected by llguidance").split("\n<state>")[0].strip()
    return text.split("\n")[0][:500] or "rejected by llguidance"
