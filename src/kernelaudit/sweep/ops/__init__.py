"""Ops as data: ``spec`` defines :class:`OpSpec` and layouts; ``catalog`` lists the ops
the sweep runs."""
