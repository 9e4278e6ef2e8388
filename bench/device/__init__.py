"""Drivers for the GPU machine: one call per benchmark or evidence run, and the Triton wheels carried there."""
