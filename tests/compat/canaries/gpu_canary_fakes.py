"""Fake canary targets for tests/compat/canaries/test_gpu_canaries.py (imported by the canary child process)."""

import math
import os
import time


def abort(device):  # an illegal memory access kills the process the same way: no result line
    os.abort()


def wrong(device):
    return {"max_err": 1.0, "tol": 0.01}


def nan(device):
    return {"max_err": math.nan, "tol": 0.01}


def hang(device):
    time.sleep(60)


def raises(device):
    raise RuntimeError("PassManager::run failed")
