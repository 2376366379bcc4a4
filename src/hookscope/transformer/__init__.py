"""Transformers and text: attention from any implementation, token views and attributions, rollout, logit lens,
and linear attention (GatedDeltaNet, Mamba): gates, state and implied token mixing (recurrent.py)."""
