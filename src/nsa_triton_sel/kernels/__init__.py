"""Triton kernels (``jit``), their launch configuration (``meta``) and torch launchers (``launch``)."""
