"""Transformers and text: attention from any implementation, token views and attributions, rollout, logit lens."""
