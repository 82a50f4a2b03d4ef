"""The one request path every inference route takes: an `InferenceInput` in, a stream or a whole answer out.

`InferenceService` composes the steps of gateway/inference/, one module each:

    prepare():  PromptEncoder.tokenize (size check on bytes, then tokenize in a worker thread)
                -> Admission.admit (classify unless the route already did, key and rate-limit checks,
                max_tokens, SamplingParams and EngineRequest built once) -> Admission.check_grammar
                (bounded, then compiled and its first step tried on the grammar executor, in a grammar
                child process: too complex is a 400, never an engine failure or a crash)
    generate(): Runner.generate: EngineClient.generate with the `running` row written ahead and the
                final row, Prometheus metrics and canonical-log fields recorded however it ends (Recorder).
    collect():  generate() gathered into one Completion.

Routes build an InferenceInput and call prepare() then generate() or collect(); every prompt they send
is tokenized here, and they never reach into the engine client. Three routes read the tokenizer
(`service.tokenizer`) for what is not a prompt: the OpenAI routes decode logprobs' tokens and echo a
token-id prompt as text, /tokenize and /detokenize (routes/utility.py) are the tokenizer, and the risk
route reads its judgement's token texts (gateway/verdict.py). Two routes classify before preparing,
through `classify()`: risk, whose class picks the prompt (the class is passed on, not decided again),
and document registration, which runs no inference but checks the class its questions will take.
Spans (gateway/spans.py): admission around prepare(), each ledger write until durable, and the engine's
queue/prefill/decode phases made from the engine's timestamps once a request is done.
Ledger rows, and why every admitted request leaves exactly one: gateway/inference/record.py.
"""
from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from pathlib import Path

from core.keys import KeyInfo
from core.settings import Settings
from core.web.context import RequestContext
from core.web.errors import APIError
from engine.outputs import RequestOutput
from engine.protocol import EngineClient
from engine.tokenizer import Tokenizer
from gateway import spans
from gateway.inference.admission import Admission
from gateway.inference.errors import openai_shape
from gateway.inference.inputs import Admitted, Classified, InferenceInput, PromptEncoder
from gateway.inference.record import Recorder
from gateway.inference.run import Completion, Runner
from gateway.state import GatewayState


def served_model_name(settings: Settings, engine_client: EngineClient | None) -> str:
    """`Settings.model_id` for the folder `engine_client`'s engine runs (an injected engine may run another)."""
    return settings.model_id(engine_client.engine.config.model if engine_client is not None else None)


class InferenceService:
    """One per request (built by the ServiceDep dependency; one per choice with `n` or prompt lists)."""

    def __init__(self, state: GatewayState, client: EngineClient) -> None:
        self.state = state
        self.client = client
        self.prompts = PromptEncoder(client.tokenizer, state.policy)
        self.recorder = Recorder(state, client)
        self.admission = Admission(state, client, self.recorder)
        self.runner = Runner(client, self.recorder)

    @property
    def model_name(self) -> str:
        return served_model_name(self.state.settings, self.client)

    @property
    def max_model_len(self) -> int:
        return self.client.engine.max_model_len

    @property
    def model_folder(self) -> Path:
        return Path(self.client.engine.config.model)

    @property
    def tokenizer(self) -> Tokenizer:
        return self.client.tokenizer

    @property
    def weights(self) -> dict[str, str] | None:
        """The weight format the embedded engine loaded and why (None with engine replicas)."""
        from engine.model.linear import weights_of  # torch: imported once the engine is loaded anyway
        from ledger.versions import loaded_weight_format

        fmt = loaded_weight_format(self.client)
        return None if fmt is None else weights_of(self.client.engine.config, fmt)

    def max_prompt_bytes(self, workload_class: str | None = None) -> int:
        return self.prompts.max_prompt_bytes(workload_class)

    async def count_tokens(self, text: str, workload_class: str | None = None) -> int:
        return await self.prompts.count_tokens(text, workload_class)

    def classify(self, key: KeyInfo, *, route: str, explicit: str | None, input_tokens: int) -> Classified:
        """The class a request on `route` takes, for a route that must know it before its prompt exists; pass
        it on in InferenceInput.classified so prepare() uses it rather than deciding again."""
        return self.admission.classify(key, route=route, explicit=explicit, input_tokens=input_tokens)

    def forbidden(self, key: KeyInfo, c: Classified, route: str) -> APIError | None:
        """Why `key` may not use class `c` on `route` (the check admission makes), or None."""
        return self.admission.forbidden(key, c, route)

    async def prepare(self, ctx: RequestContext, key: KeyInfo, inp: InferenceInput) -> Admitted:
        """Tokenize and admit `inp`: the Admitted request is ready for generate() or collect()."""
        with spans.admission(inp.route) as span:
            adm = await self._prepare(ctx, key, inp)
            spans.admitted(span, request_id=adm.request.request_id, tenant=adm.key.tenant,
                           workload_class=adm.cls.name, rule=adm.rule, input_tokens=adm.request.num_prompt_tokens,
                           max_tokens=adm.request.sampling.max_tokens)
            return adm

    async def _prepare(self, ctx: RequestContext, key: KeyInfo, inp: InferenceInput) -> Admitted:
        t0 = time.time()
        known = inp.classified.cls.name if inp.classified is not None else inp.explicit_class
        try:
            ids = await self.prompts.tokenize(inp.prompt, known)
        except APIError as exc:
            raise openai_shape(inp.route, exc, self.max_model_len) from None
        ctx.fields.update(inp.log_fields)
        try:
            adm = self.admission.admit(ctx, key, inp, ids, tokenize_start=t0, tokenized=time.time())
            self.state.ledger.evidence.begin(adm.request, adm.cls, route=inp.route, prompt=inp.prompt)
            await self.admission.check_grammar(adm, inp.tools)
            return adm
        except APIError:
            await self.recorder.durable()  # a refusal is an answer too: its row is safe before it is sent
            raise

    def generate(self, adm: Admitted) -> AsyncGenerator[RequestOutput, None]:
        """The engine's outputs for `adm` (Runner.generate); closing it early aborts the request."""
        return self.runner.generate(adm)

    async def collect(self, adm: Admitted) -> Completion:
        return await self.runner.collect(adm)
