# The two commands a newcomer needs: `make demo` and `make test`. Each creates .venv when it
# is missing or older than pyproject.toml, installs the project editable with its extras, runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
# Jars (Apache Kafka; later Spark's Delta/Iceberg) are cached in the checkout, git-ignored.
export KAFKA_AUTOSCALER_CACHE ?= $(CURDIR)/.cache
JARS_STAMP := $(KAFKA_AUTOSCALER_CACHE)/.jars-$(shell cat consumer_sdk/locks/*.lock | cksum | cut -d' ' -f1)

.PHONY: demo test lint bench clean jars

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --editable '.[dev]'
	touch $(STAMP)

# Fetches the locked jars from Maven Central and checks their sha256 (no Maven needed).
$(JARS_STAMP): $(STAMP)
	$(PY) -m consumer_sdk.jar_lock fetch
	touch $(JARS_STAMP)

jars: $(JARS_STAMP)

demo: $(STAMP) $(JARS_STAMP)
	$(PY) -m examples.demo $(DEMO_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The whole suite: every Kafka test on the embedded broker and on Apache Kafka.
test: lint $(JARS_STAMP)
	$(PY) -m pytest

bench: $(STAMP) $(JARS_STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) .cache .mypy_cache .pytest_cache .ruff_cache .hypothesis
