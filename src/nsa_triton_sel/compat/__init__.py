"""The compatibility toolkit: compile smoke, lanes, verdict ledger, known-good pins, pre-upgrade check.

This wing runs the Triton matrix; the kernel library (``nsa_triton_sel`` outside this package)
never imports it.  Modules here import only the standard library and ``packaging`` at module
level, so the noxfile can load them before any lane environment exists.
"""
