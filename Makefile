# hvnet: the two commands are 'make run' and 'make test' (see README.md).
VENV   := .venv
HVNET  := $(VENV)/bin/hvnet
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=
RPM_OUT     ?= build/rpms
REPO_DIR    ?= build/repo

.PHONY: setup run test lab lab-down lint bench bench-dom0 clean rpm rpm-ovs rpm-dom0 repo docs

setup:
	@./.ci/setup-host

## run: set up, bring up the built-in lab and open the terminal UI on it
run: setup
	$(HVNET) lab up
	@if [ -t 0 ] && [ -t 1 ]; then $(HVNET) tui; else echo "no terminal: skipping the TUI (run '$(HVNET) tui')"; $(HVNET) status; fi

## test: set up, then run the whole test suite (needs root: real OVS, namespaces); each test's time in build/test-results.xml
test: setup
	$(PY) -m pytest -ra --durations=30 --junitxml=build/test-results.xml $(PYTEST_ARGS)

lab: setup
	$(HVNET) lab up

lab-down:
	@if [ -x $(HVNET) ]; then $(HVNET) lab down; else echo "no venv: nothing to do"; fi

lint: setup
	$(VENV)/bin/ruff check appliance tui tests
	$(VENV)/bin/ruff format --check appliance tui tests
	$(VENV)/bin/lint-imports

## docs: the manual (docs/) as HTML and man pages into build/docs/{html,man}, warnings as errors
docs: setup
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs build/docs/html
	$(VENV)/bin/sphinx-build -W --keep-going -q -b man docs build/docs/man

bench: setup
	$(PY) tests/bench/run.py

## bench-dom0: the dom0 package's runtime against the venv (sizes, status --json, console), on the lab; needs 'make rpm-dom0'
bench-dom0: setup
	$(PY) tests/bench/dom0_bench.py

## rpm: the hvnet and netperf RPMs, from the committed tree, into $(RPM_OUT) (see README)
rpm:
	@./rpm/build-rpms $(RPM_OUT)

## rpm-dom0: hvnet-dom0, for a XenServer 8 / XCP-ng 8.x dom0: its own Python for glibc 2.17 (rpm/dom0/build-rpm; ~10 min the first time)
rpm-dom0:
	@./rpm/dom0/build-rpm $(RPM_OUT)

## rpm-ovs: Open vSwitch RPMs (Debian's OVS source, upstream Fedora/RHEL spec) into $(RPM_OUT)
rpm-ovs:
	@./rpm/build-ovs $(RPM_OUT)

## repo: a yum repository (createrepo_c) of the RPMs in $(RPM_OUT), in $(REPO_DIR)
repo: rpm
	@./rpm/make-repo $(RPM_OUT) $(REPO_DIR)

clean: lab-down
	rm -rf $(VENV) .pytest_cache
