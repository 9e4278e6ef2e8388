"""Shared pieces of the benchmarks, one concern each (imported as ``from bench.common import X``):

- :mod:`.csvio`: the CSV schema, reading/writing it, list arguments;
- :mod:`.accounting`: bytes, FLOPs, effective rates, device ceilings, the environment columns;
- :mod:`.timers`: CUDA-event, CUDA-graph, wall and modelled timers;
- :mod:`.problems`: span layouts and NSA selections, the contenders' adapters;
- :mod:`.guards`: suspect-row guards of a sweep.
"""
