"""The cost model: how long a run takes on a cluster before it trains (step time, memory, the
gradient exchange, the cluster's spec), and this machine's measured step time."""
