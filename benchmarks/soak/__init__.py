"""An hour under faults (``python -m benchmarks.soak``): the run (``run``), the faults'
schedule (``faults``) and the network cut (``network_cut``)."""
