"""Shared fixtures. Tests run in float64 unless they cast to float32 explicitly."""

import itertools

import jax
import jax.random as jr
import pytest

# Tests only: the library itself never flips this flag.
jax.config.update("jax_enable_x64", True)


@pytest.fixture
def getkey():
    """A fresh PRNG key per call, deterministic within a test (seeds 0, 1, 2, ...)."""
    seeds = itertools.count()

    def _getkey():
        return jr.PRNGKey(next(seeds))

    return _getkey
