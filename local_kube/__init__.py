"""A real Kubernetes control plane and KEDA on this machine, for the tests and benchmarks.

:mod:`local_kube.control_plane` runs etcd, kube-apiserver and kube-controller-manager from the
binaries ``make kube-binaries`` builds; :mod:`local_kube.keda` installs and runs KEDA's operator
and metrics server on it. Like :mod:`local_kafka`, never imported by the product.
"""
