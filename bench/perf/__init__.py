"""Timing scripts of the library's calls: the selection sweep behind the threshold, the forward contender tables,
the default route, the host cost of a call and the cost of a packed batch."""
