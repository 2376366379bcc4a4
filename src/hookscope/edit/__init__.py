"""Edits: change what a layer produces, receives or gets back, patch between runs, and prove each edit took effect."""
