"""Schema-constrained decoding: a JSON Schema becomes a per-step mask over the vocabulary (llguidance).

`compile_json_schema(tokenizer, schema_json)` validates the schema and compiles it into a
grammar once per (tokenizer, schema text); every request that decodes under that schema gets
its own `GrammarState` from `CompiledGrammar.new_state()`. Each step the sampler asks the state
for `allowed_mask(vocab_size)` (True = the token keeps the output a valid prefix of some
document the schema accepts), samples, and feeds the token back with `accept`; tokens the grammar
forces next (`forced_tokens`) are appended without sampling (jump-forward). When the
document is complete `is_terminated()` turns True and the engine stops the request ("stop").

Validation, compilation and the first steps' probe of a client's constraint run in a grammar child
process (engine/grammar_pool.py, engine/grammar_check.py): a native crash there fails that request
(`GrammarCompilerFailed`), never this process. This module keeps the outcome per (tokenizer, kind,
constraint text), so a repeated constraint costs nothing, and builds the matchers from the grammar the
child accepted.

The JSON is compact (no optional whitespace): it saves tokens, and a model that likes spaces
can never spend its whole budget on them inside an otherwise finished object.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.torch as llg_torch
import tokenizers
import torch

from engine import grammar_pool
from engine.grammar_check import reason, unwritable_error, writable_text
from engine.grammar_pool import Compiled, GrammarCompilerFailed, TokenizerSpec
from engine.outputs import UnwritableOutput
from engine.request import SamplingParams

if TYPE_CHECKING:
    from engine.tokenizer import Tokenizer

_BIT_SHIFTS = torch.arange(32, dtype=torch.int32)  # unpacks one int32 word into 32 token bits


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


@lru_cache(maxsize=4)
def _tokenizer_spec(tokenizer: Tokenizer | tokenizers.Tokenizer) -> TokenizerSpec:
    """The vocabulary as a grammar child builds the same LLTokenizer from it (keyed by its content)."""
    text = _backend(tokenizer).to_str()
    return TokenizerSpec(hashlib.sha256(text.encode()).hexdigest()[:32], text, _eos_ids(tokenizer))


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
    return writable_text(_ll_tokenizer(tokenizer), text, json_string=json_string)


def validate_json_schema(schema_json: str) -> tuple[dict[str, Any], str]:
    """Check a schema and build its grammar (in a grammar child); returns (schema, llguidance grammar).

    ValueError names the problem: not JSON, not an object, invalid against its JSON Schema
    meta-schema, or using a feature llguidance cannot enforce (e.g. an unknown "format");
    GrammarCompilerFailed (a ValueError) when the compiler died or ran out of time on it.
    """
    done = _outcome(None, "json_schema", schema_json)
    assert done.grammar is not None and done.schema is not None
    return json.loads(done.schema), done.grammar


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """A validated schema compiled for one tokenizer. Immutable and shared between requests."""

    schema: dict[str, Any]  # the JSON schema; {} for a regex or choice grammar
    grammar: str  # llguidance's serialized grammar
    ll_tokenizer: llguidance.LLTokenizer
    problem: str | None = None  # why the probe found it cannot be decoded (check_constraint refuses it)

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
            raise ValueError(f"{what}: {reason(self._matcher.get_error())}")

    def accept_forced(self, tokens: list[int]) -> None:
        """Advance by jump-forward tokens (`forced_tokens`). llguidance makes them by tokenizing the forced
        text; text the vocabulary cannot write comes out as other tokens (a byte dropped, a special token),
        which its own matcher refuses ("forced bytes: ..."): UnwritableOutput, the client's grammar at fault."""
        for t in tokens:
            if not self._matcher.consume_token(t):
                raise UnwritableOutput(f"token {t} is not allowed by the grammar ({reason(self._matcher.get_error())}"
                                       "): the text it forces cannot be written in this model's tokens")

    def _raise_if_unwritable(self, what: str) -> None:
        stuck = unwritable_error(self._matcher, what)
        if stuck is not None:
            raise stuck

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
    uses a feature llguidance cannot enforce (e.g. an unknown "format"); GrammarCompilerFailed when
    the compiler died or ran out of time on it.
    """
    return _compile(tokenizer, "json_schema", schema_json)


def compile_regex(tokenizer: Tokenizer | tokenizers.Tokenizer, pattern: str) -> CompiledGrammar:
    """Output constrained to match `pattern` (Rust regex syntax) as a whole; cached. ValueError on a pattern
    llguidance refuses."""
    return _compile(tokenizer, "regex", pattern)


def compile_choice(tokenizer: Tokenizer | tokenizers.Tokenizer, choices: tuple[str, ...]) -> CompiledGrammar:
    """Output constrained to exactly one of `choices` (literals, never patterns); cached. ValueError on an
    empty list or string."""
    return _compile(tokenizer, "choice", json.dumps(list(choices)))


@lru_cache(maxsize=256)
def _outcome(tokenizer: Tokenizer | tokenizers.Tokenizer | None, kind: str, spec: str) -> Compiled:
    """The grammar child's verdict on a constraint (`spec`: the schema text, the regex or the JSON list of
    choices), probed when a tokenizer is given. Kept whatever it is, so a repeated constraint, valid or not,
    costs nothing; a crash is kept too (the same text crashes the same way), a timeout is not (load-dependent)."""
    spec_of = _tokenizer_spec(tokenizer) if tokenizer is not None else None
    try:
        return grammar_pool.pool().compile(kind, spec, spec_of)
    except GrammarCompilerFailed as exc:
        if exc.code != "grammar_compiler_crashed":
            raise
        return Compiled(None, None, None, None, crashed=str(exc))


def _valid(done: Compiled) -> Compiled:
    if done.crashed is not None:
        raise GrammarCompilerFailed("grammar_compiler_crashed", done.crashed)
    if done.error is not None:
        raise ValueError(done.error)
    return done


class _Compiled:
    """The compiled grammars by (tokenizer, kind, constraint text), least recently used dropped past `size`;
    `peek` lets a caller skip the grammar executor for a constraint already compiled (`ready`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[object, str, str], CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def peek(self, key: tuple[object, str, str]) -> CompiledGrammar | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def keep(self, key: tuple[object, str, str], grammar: CompiledGrammar) -> CompiledGrammar:
        with self._lock:
            kept = self._items.setdefault(key, grammar)  # a concurrent compile of the same text: one object
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return kept


_COMPILED = _Compiled(256)


def _compile(tokenizer: Tokenizer | tokenizers.Tokenizer, kind: str, spec: str) -> CompiledGrammar:
    key = (tokenizer, kind, spec)
    found = _COMPILED.peek(key)
    if found is not None:
        return found
    done = _valid(_outcome(tokenizer, kind, spec))
    assert done.grammar is not None and done.schema is not None
    return _COMPILED.keep(key, CompiledGrammar(schema=json.loads(done.schema), grammar=done.grammar,
                                               ll_tokenizer=_ll_tokenizer(tokenizer), problem=done.problem))


# ---- one request's constraint, compiled and probed before it is admitted ---------------------------


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


def ready(tokenizer: Tokenizer | tokenizers.Tokenizer, p: SamplingParams) -> bool:
    """True when `p` has no constraint, or it is compiled for `tokenizer` and its probe found nothing: checking
    it again would only read the cache (the gateway then skips its grammar executor)."""
    kind = constraint_kind(p)
    found = _COMPILED.peek((tokenizer, kind, _spec(p))) if kind is not None else None
    return kind is None or (found is not None and found.problem is None)


def _spec(p: SamplingParams) -> str:
    """The constraint's text as `_compile` keys it: the regex, the JSON list of choices or the schema."""
    if p.regex is not None:
        return p.regex
    if p.choice is not None:
        return json.dumps(list(p.choice))
    return p.json_schema or ""


def check_constraint(tokenizer: Tokenizer | tokenizers.Tokenizer, p: SamplingParams) -> None:
    """Compile `p`'s constraint and probe its first steps; ValueError with llguidance's reason if unusable.

    llguidance's size limits (ParserTooComplex for a recursive `$ref`, "too many expressions" for a
    regex like `(a{1000}){1000}`, a row of more than 2,000 items for 20,000 choices) fire when the
    first tokens are computed, not when the grammar is built. Probing here (the gateway calls it on its
    grammar executor before the request is admitted) turns them into a client error instead of a
    request that fails inside the engine; so is a literal the model cannot write (`writable`). The probe
    runs in the grammar child with the compile, and its finding is cached with the compiled grammar.
    """
    grammar = compile_constraint(tokenizer, p)
    if grammar is not None and grammar.problem is not None:
        raise ValueError(grammar.problem)
