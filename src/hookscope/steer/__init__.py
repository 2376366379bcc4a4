"""Steering: directions read from a store, steering a generation, and what the steering did.

``hookscope.directions(store, labels, groups=pairs)`` (``.directions``) finds a direction per site with
the streamed maths of ``.contrast`` and returns ``Directions`` (``.direction``; faces in
``.direction_views``), which ``.interop`` turns into steering-vectors' and repeng's vectors and files.
``hookscope.steer.sweep`` (``steer_sweep``: propensity over scales, its slope per example, the side
effect on neutral prompts), ``.result`` (``SteerSweep``) and ``.views`` (its table, picture, notebook
view and report section). Steering a generation itself is an edit: ``edits.add(v, positions="new")``
(``hookscope.edits.tokens``).
"""
