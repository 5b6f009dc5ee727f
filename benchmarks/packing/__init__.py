"""The planner alone, no Kafka: the heuristics' packing quality and speed (the paper's
streams, the planner at scale, rack-aware packing). Results in benchmarks/results/."""
