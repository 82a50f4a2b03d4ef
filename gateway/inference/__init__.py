"""The inference path every inference route takes, one module per step (gateway/service.py composes them):

    inputs.py     InferenceInput from the route; PromptEncoder: size check on bytes, then tokenize
    admission.py  classify, key and rate-limit checks, max_tokens, SamplingParams and EngineRequest built
                  once, the output grammar probed
    run.py        the engine's outputs, with the `running` row written ahead and the final row after
    record.py     every ledger row (ledger.row.row_from_outcome), metrics and canonical-log fields
    errors.py     the client's error for each refusal and failure
"""
