"""The network as a picture: a module graph from one pass (``trace``), its layout and SVG, overlays, memory per layer."""
