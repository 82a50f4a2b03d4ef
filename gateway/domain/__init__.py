"""The domain routes: risk assessment (verdicts, prompts, rule scoring) and document questions (cached document
prefixes, quoted answers)."""
