"""The training benchmarks: forward + backward against the peers, the backward's launch sweep, a kernel profile."""
