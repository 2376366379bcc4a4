"""Tensor in, numbers out: ``summary`` (``summarize`` one tensor, ``gradient_flow`` across a
capture) and ``streaming`` (``RunningStats``, mergeable statistics of a stream of tensors).
Built on ``hookscope.core``. This file re-exports nothing.
"""
