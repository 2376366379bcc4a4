"""Tensors and numbers in, PIL images out: ``images`` (feature grids, overlays, panels) and
``charts`` (matplotlib histograms and gradient flow), ``curves``, ``highlight``, ``fragments``, and
``fonts`` (the one text size of every chart). Pillow and matplotlib are imported when a
picture is drawn. This file re-exports nothing.
"""
