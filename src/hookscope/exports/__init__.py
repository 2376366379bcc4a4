"""Write what hookscope measured in another tool's format: ``hookscope.export(source, out, format=...)``.

One module per format (``exports.dispatch`` holds the table): a store to a Hugging Face datasets
folder in SAE Lens's layout, a graph overlay to Model Explorer node data.
"""
