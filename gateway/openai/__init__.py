"""The OpenAI-compatible API: routes, request and response schemas, choices and logprobs, tool calls, sampling."""
