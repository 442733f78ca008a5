"""What both halves share: configuration problems and observability (metrics, health, logs)."""
