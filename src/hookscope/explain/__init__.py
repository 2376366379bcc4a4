"""What a score owes to layers and inputs: ``targets`` (what is explained), ``cam`` (class
activation maps: the maths, the registry of methods and the driver), ``attribute`` (gradients
with respect to the input). Built on ``hookscope.core``. This file re-exports nothing.
"""
