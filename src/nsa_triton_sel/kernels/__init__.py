"""Triton kernels (``forward``), their tile tables (``meta``) and torch launchers (``launch``)."""
