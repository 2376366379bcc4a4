"""The capture engine: hooks inside a ``with`` block, turned into ``Record`` and ``Call`` objects.

``select`` turns selectors into modules (``scripted`` takes out the TorchScript ones), ``hooks``
is the only caller of torch's ``register_*``, ``tree`` flattens structured values into keys, ``kinds``
is the one table of what can be captured, ``records`` holds what a capture keeps, ``policy`` decides
how a tensor is kept (``host_copy`` moves it off an accelerator without stalling), ``diagnosis`` says
why something was not captured, and ``capture`` ties them together.
Nothing here imports another sub-package of hookscope. This file re-exports nothing.
"""
