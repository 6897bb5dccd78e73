"""Product 3, the oracle zoo: judge KernelBench-format kernels with oracles that catch
what the official checker misses.

``check`` runs one candidate against a problem under a sequence of oracles (each in a
fresh process); ``oracles/`` holds the oracles; ``problems/`` the loader, the corpus
of problems, their verified Triton solutions and the known-wrong mutants.
"""
