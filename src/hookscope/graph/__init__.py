"""The network as a picture: a module graph from one pass, its layout and SVG, overlays, memory per layer."""
