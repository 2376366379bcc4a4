"""Tensors and numbers in, PIL images out: ``images`` (feature grids, overlays, panels) and
``charts`` (matplotlib histograms and gradient flow). Pillow and matplotlib are imported when a
picture is drawn. This file re-exports nothing.
"""
