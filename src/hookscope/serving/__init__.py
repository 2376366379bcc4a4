"""Capture and edit inside a vLLM engine, per request, verified: ``hookscope.capture_llm``, ``hookscope.edit_llm``.

``engine.py`` holds ``capture_llm`` and the block both verbs share (the driver's side: it reaches
the workers through ``LLM.collective_rpc``); ``intervene.py`` holds ``edit_llm``; ``worker.py`` is
what runs beside the model in each worker (an importable module, so the multiprocess engine can
call it); ``packing.py`` reads a step's packed batch as requests; ``steering.py`` applies edits to
one request's rows; ``sink.py`` streams each finished request to a store; ``parallel.py`` makes
values split over tensor-parallel ranks whole; ``result.py`` and ``views.py`` are the edit report
and its faces.
"""
