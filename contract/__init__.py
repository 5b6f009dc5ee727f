"""The contract between the sidecar and the consumers, below both: the settings they share,
the speed snapshot schema, the topic metadata helper, the overload watch, and what ties a
consumer process to the sidecar that started it. Imports only ``assignor``."""
