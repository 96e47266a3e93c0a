# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1
# Most tests start Python processes (writers, companion jobs, Spark's workers): each would
# compile the package again where the environment turns bytecode caches off.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install lint test test-full demo notebooks chaos bench bench-full clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Three pytest workers, each test file on one of them (its module fixtures start once): most
# tests wait on real processes (ZooKeeper sessions, heartbeats, Spark jobs), so with two workers
# the two cores were about 22% idle, with three about 8%. The files that use Spark go to one
# worker together, so one SparkSession serves the run however many workers there are. Files go
# out in collection order, the Spark files first, then the slowest (tests/conftest.py).
test: install lint
	$(PY) -m pytest tests -q -n 3 --dist loadfile --no-loadscope-reorder --durations=25

# The whole fault matrices (frozen writers on every pair of table type and lock, every metadata
# table fault in both modes, a writer killed at every step, every seeded chaos round, both clock
# skews, a late Spark attempt under both write APIs, both table types aged on S3), a Spark
# bootstrap killed mid-way, every notebook executed and the batch upsert through the standalone
# cluster, which `make test` samples to stay within its time: those files alone.
test-full: install
	MW_FULL_MATRIX=1 $(PY) -m pytest tests/test_frozen_commit.py tests/table/test_metadata_faults.py \
		tests/chaos/test_chaos_small.py tests/test_bootstrap.py tests/test_notebooks.py \
		tests/write/test_standalone_cluster.py tests/write/test_late_spark_attempt.py \
		tests/test_clock_skew.py tests/test_faults.py tests/test_s3_requests.py -q -n 2

# ruff, then the import contracts in pyproject.toml (tools > benchmarks > testbed > multiwriter,
# layers one way, pyspark only in the Spark adapters, no cycles in the cleaner and the benchmarks)
lint: install
	$(PY) -m ruff check multiwriter tests tools benchmarks testbed
	$(VENV)/bin/lint-imports --no-cache

demo: install
	$(PY) -m multiwriter.cli demo

# Executes every notebook and writes the executed copy (outputs and plots) to docs/notebooks/.
notebooks: install
	$(PY) -m tools.execute_notebooks --out docs/notebooks

chaos: install
	$(PY) -m tests.chaos.run --minutes $${MINUTES:-30}

# Every section; `make bench ONLY=long_run` runs one (its block of RESULTS.md replaced, the others kept).
bench: install
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m benchmarks.run --size small $(if $(ONLY),--only $(ONLY))

bench-full: install
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m benchmarks.run --size full $(if $(ONLY),--only $(ONLY))

clean:
	rm -rf demo-output .pytest_cache build *.egg-info
