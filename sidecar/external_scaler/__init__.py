"""KEDA's external scaler, served by the sidecar (``--scaler keda``): KEDA keeps scaling the
workload through its HPA, and the count it scales to is the sidecar's.

``messages`` holds the protocol's messages (KEDA's ``externalscaler.proto``), ``answers``
what the sidecar answers (pure: no gRPC, no I/O), ``server`` the gRPC service around them.
"""
