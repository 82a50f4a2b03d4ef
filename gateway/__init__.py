"""The HTTP gateway for inference: routes (OpenAI, risk, documents, requests, reports, health), the inference
pipeline (`service.py` over `inference/`), streaming, metrics, rate limits and engine replicas (`replicas/`)."""
