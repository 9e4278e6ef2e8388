"""Probes of the live kernels: variants and ceilings of the forward, dq and dk/dv kernels, the decode split count,
the backward's resources as a real launch compiles them."""
