"""Training-time diagnostics: watch a model while it trains, and find the first non-finite value where it is born."""
