"""Triton kernels and their launchers.

``forward`` and ``backward`` are the ``@triton.jit`` sources (``common`` their shared helpers); ``launch``
launches what a plan (``nsa_triton_sel.plan``) says, naming every argument (``params``) and, on a GPU,
through the bound launcher (``bind``); ``readers`` builds the backward's reader list; ``direct`` holds the
kernel-level entry points with explicit choices (tests, benchmarks, the seeds' APIs).
"""
