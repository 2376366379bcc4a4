"""Transformers and text: attention weights from any implementation, token views, token attributions, rollout, logit lens."""
