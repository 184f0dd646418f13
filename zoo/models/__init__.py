"""The containers: the pieces of zoo.nn put together into whole networks, and how a network
generates (sampling, greedy and beam search)."""
