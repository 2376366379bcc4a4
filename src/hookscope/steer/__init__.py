"""Steering: directions, steering a generation, and what the steering did.

``hookscope.steer.sweep`` (``steer_sweep``: propensity over scales, its slope per example, the side
effect on neutral prompts), ``.result`` (``SteerSweep``) and ``.views`` (its table, picture, notebook
view and report section). Steering a generation itself is an edit: ``edits.add(v, positions="new")``
(``hookscope.edits.tokens``).
"""
