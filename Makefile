# The two commands a newcomer needs: `make demo` and `make test`. Each creates .venv when it
# is missing or older than pyproject.toml, installs the project editable with its extras, runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
# Jars (Apache Kafka; later Spark's Delta/Iceberg) are cached in the checkout, git-ignored.
export KAFKA_AUTOSCALER_CACHE ?= $(CURDIR)/.cache
# podman and buildah read the project's settings, never the machine's (containers/).
export CONTAINERS_CONF ?= $(CURDIR)/containers/containers.conf
# The locked jars: Spark's lake formats (the SDK) and Apache Kafka (the local clusters); and,
# for tests and benchmarks only, Kafka Connect with Iceberg's sink (the peer).
LOCKS := consumer_sdk/lake/locks/spark-lake.lock local_kafka/locks/apache-kafka.lock
PEER_LOCKS := local_kafka/locks/kafka-connect-iceberg.lock
PEER_JARS_STAMP := $(KAFKA_AUTOSCALER_CACHE)/.peer-jars-$(shell cat $(PEER_LOCKS) | cksum | cut -d' ' -f1)
JARS_STAMP := $(KAFKA_AUTOSCALER_CACHE)/.jars-$(shell cat $(LOCKS) consumer_sdk/lake/java/kafkaautoscaler/*/*.java assignor/broker/java/kafkaautoscaler/*/*.java | cksum | cut -d' ' -f1)

.PHONY: demo test test-setup lint docs lock cluster images test-images container-tools monitoring-tools bench bench-headline clean jars kube-binaries fuzz-tools fuzz

# From the hashed locks (requirements/, `make lock`): pip and the build backend first, then
# every extra's dependencies, each file checked against its sha256; sources-only packages and
# the project build with the locked backend (no unpinned download at build time). The
# project's own install compiles the native record-batch decoder (consumer_sdk/records/native/).
$(STAMP): pyproject.toml requirements/bootstrap.txt requirements/dev.txt consumer_sdk/records/native/kafka_records.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements/bootstrap.txt
	$(PY) -m pip install --quiet --require-hashes --no-build-isolation -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --editable .
	touch $(STAMP)

# requirements/*.txt again from pyproject.toml (scripts/lock_python.sh; UPGRADE=1: newest).
lock: $(STAMP)
	scripts/lock_python.sh

# Fetches the locked jars from Maven Central and checks their sha256 (no Maven needed), then
# builds our commit checks (consumer_sdk/lake/commit_checks.py) and the broker-side assignor
# (local_kafka/broker_assignor.py) against them; needs javac.
$(JARS_STAMP): $(STAMP)
	$(PY) -m consumer_sdk.lake.jar_lock fetch $(LOCKS)
	$(PY) -m consumer_sdk.lake.commit_checks
	$(PY) -m local_kafka.broker_assignor
	touch $(JARS_STAMP)

jars: $(JARS_STAMP)

$(PEER_JARS_STAMP): $(STAMP)
	$(PY) -m consumer_sdk.lake.jar_lock fetch $(PEER_LOCKS)
	touch $(PEER_JARS_STAMP)

# etcd, kube-apiserver, kube-controller-manager and KEDA (operator, metrics server) for the
# tests against a real control plane, a node's kubelet, kube-scheduler, containerd and pause,
# and Helm for the chart's, built from the Go module proxy
# into $(KAFKA_AUTOSCALER_CACHE)/kube/bin (once: about 27 minutes on 2 cores, Helm 2 of them,
# then seconds). Without Go the kube-apiserver, KEDA and chart tests skip.
kube-binaries:
	@if command -v go >/dev/null; then scripts/build_kube_control_plane.sh; \
	else echo "go not installed: the kube-apiserver tests will be skipped"; fi

# clang with libFuzzer and the sanitizers, for the fuzzers of the record path (fuzz/); from
# Debian's packages where missing and we are root (CI is), else their test says why it skips.
fuzz-tools:
	@{ command -v clang && dpkg -s libclang-rt-dev; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		clang libclang-rt-dev >/dev/null; } || echo "clang not installed: the fuzz test skips"; }

# podman, buildah and mmdebstrap from Debian's packages where missing and we are root (CI is);
# runc and the CNI plugins serve the node's containerd too (local_kube/node.py).
container-tools:
	@{ command -v podman && command -v buildah && command -v mmdebstrap && command -v runc && \
		test -x /usr/lib/cni/loopback; } >/dev/null 2>&1 || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc mmdebstrap \
		uidmap fuse-overlayfs slirp4netns containernetworking-plugins >/dev/null; } || \
		echo "podman/buildah not installed"; }

# promtool and prometheus, which check the alert rules and dashboard of examples/monitoring
# (promtool's checks and unit tests; a real Prometheus scraping a real run): taken out of
# Debian's prometheus package into $(KAFKA_AUTOSCALER_CACHE)/promtool (apt checks the
# package's signature; nothing is installed or started). As root, apt's package lists are
# fetched first if it has none.
PROMTOOL := $(KAFKA_AUTOSCALER_CACHE)/promtool/usr/bin/promtool
monitoring-tools:
	@test -x $(PROMTOOL) || { command -v apt-get >/dev/null && \
		mkdir -p $(KAFKA_AUTOSCALER_CACHE)/promtool && \
		{ [ "$$(id -u)" != 0 ] || ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || apt-get update -qq; } && \
		cd $(KAFKA_AUTOSCALER_CACHE)/promtool && apt-get download -qq prometheus 2>/dev/null && \
		dpkg-deb -x prometheus_*.deb . && rm prometheus_*.deb; } || \
		echo "prometheus's package not available: the monitoring tests skip"

# A control plane and one node (kubelet, containerd) with our images, until Ctrl-C; it prints
# the KUBECONFIG to use (local_kube/node.py; root).
cluster: $(STAMP) kube-binaries images
	$(PY) -m local_kube.node

# The sidecar and consumer images (containers/Containerfile) with buildah, from a Debian base
# made here; no Docker daemon, no registry (scripts/build_images.sh says how).
images: $(STAMP) $(JARS_STAMP) container-tools
	scripts/build_images.sh

# For make test: the images where podman and buildah are, else their tests say why they skip.
test-images: $(STAMP) $(JARS_STAMP) container-tools
	@if command -v buildah >/dev/null && command -v podman >/dev/null; then \
		scripts/build_images.sh; else echo "no podman/buildah: the image tests will be skipped"; fi

# The long fuzz run whose figures are committed (benchmarks/results/fuzz.md).
fuzz: $(STAMP) fuzz-tools
	$(PY) -m fuzz.run --c-runs 10000000 --python-runs 1000000 --control-runs 10000000 --values-runs 1000000 --write

demo: $(STAMP) $(JARS_STAMP)
	$(PY) -m examples.demo $(DEMO_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The docs site (docs/, MkDocs) into .cache/site; --strict: a broken link or anchor fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# The whole suite: every Kafka test on the embedded broker and on Apache Kafka, and the
# Kubernetes tests on the in-process API server and on a real kube-apiserver with KEDA.
# The Go builds run niced in the background beside the rest of the set-up (which runs in
# order: two apt-gets must not overlap) and the tests that need none of their binaries;
# the tests marked kube_binaries run after them (scripts/run_suite.sh).
test: $(STAMP)
	scripts/run_suite.sh

test-setup:
	$(MAKE) -j1 lint docs $(JARS_STAMP) $(PEER_JARS_STAMP) fuzz-tools monitoring-tools test-images

bench: $(STAMP) $(JARS_STAMP) $(PEER_JARS_STAMP)
	$(PY) -m benchmarks.run_all

# The README's headline figures (pause, consume throughput, Spark sink, memory) re-measured
# on the code as it is, in at most 30 minutes: run before a stop that touches them.
bench-headline: $(STAMP) $(JARS_STAMP)
	$(PY) -m benchmarks.headline

clean:
	rm -rf $(VENV) .cache .mypy_cache .pytest_cache .ruff_cache .hypothesis consumer_sdk/records/*.so
