"""Probes: what a linear read-out finds in captured activations, and the inputs a unit fires on most.

``hookscope.probe(source, labels, select=...)`` (``.probe``) fits a linear probe per site on a
group-aware split (``.fit``: the maths) and returns ``Probes`` (``.result``).
"""
