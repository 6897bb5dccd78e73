"""``kernelaudit mutate``: mutation analysis of the oracles on realistic faults.

Operators as data (:mod:`.operators`), subjects (:mod:`.subjects`: the corpus's Triton
solutions, KernelBench ``Model`` programs as ``ModelNew`` candidates), mutant
enumeration with stable ids (:mod:`.generate`), the campaign and its store
(:mod:`.campaign`, :mod:`.store`), scores (:mod:`.scores`) and reports (:mod:`.report`).
"""
