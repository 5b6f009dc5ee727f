"""The installed commands' entry points (:mod:`kafka_autoscaler.launch`)."""
