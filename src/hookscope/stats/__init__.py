"""Tensor in, numbers out: ``summary`` (``summarize`` one tensor), ``gradient_flow`` (how much gradient
reached each site of a capture), ``streaming`` (``RunningStats``: statistics of a stream of tensors, mergeable across
batches, runs and processes) and ``moments`` (the mergeable moments both are built on).
Built on ``hookscope.core``. This file re-exports nothing.
"""
