"""The containers: the pieces of zoo.nn put together into whole networks."""
