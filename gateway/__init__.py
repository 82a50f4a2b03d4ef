"""finserve's HTTP gateway, CLI and SLO ledger."""
