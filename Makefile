# The two commands that matter on a fresh machine: `make run` and `make test`.
VENV        := .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
CONFIG      ?= config/default.yaml
ENV_FILE    ?= config/default.env
CERTS       ?= certs
LISTEN      ?= 127.0.0.1:8080
METRICS     ?= 127.0.0.1:9464
PYTEST_ARGS ?=
# The repository's folders that make up the import package sandbox_egress (D140).
PACKAGES    := proxy addons runtime hookrunner common

.PHONY: install run test test-unit lint clean demo try

install: $(STAMP) $(VENV)/.optimized

# `egress-proxy run` runs under python -O (D75): its .opt-1.pyc are compiled once here, since
# a start under PYTHONDONTWRITEBYTECODE would otherwise recompile mitmproxy (~1.7 s) each time.
# Each long step says what it does, how long it takes, and how long it took (issue 48).
$(VENV)/.optimized: $(STAMP)
	@echo "make install: compiling the packages' bytecode for python -O (once; 30 s on an idle machine, minutes on a busy one) ..."
	@start=$$(date +%s); \
	$(BIN)/python -m compileall -q -j 0 -o 1 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') >/dev/null \
		|| echo "compileall: some files did not compile; they run without cached bytecode"; \
	echo "make install: bytecode compiled in $$(( $$(date +%s) - start )) s"
	@touch $@

# Re-installs only when the project's metadata changes; a broken venv is rebuilt.
$(STAMP): pyproject.toml
	@py=$$(./scripts/find-python) || exit 1; \
	if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		rm -rf $(VENV); echo "creating $(VENV) with $$py"; "$$py" -m venv $(VENV) || exit 1; \
	fi
	@echo "make install: installing the project and its dependencies into $(VENV) (the first time one to two minutes; pip names each package) ..."
	@start=$$(date +%s); \
	$(BIN)/python -m pip install --quiet --upgrade pip && \
	$(BIN)/python -m pip install --progress-bar off --disable-pip-version-check -e '.[test,lint]' && \
	echo "make install: installed in $$(( $$(date +%s) - start )) s"
	@touch $(STAMP)

run: install
	@set -a; . ./$(ENV_FILE); set +a; \
	exec $(BIN)/egress-proxy run --config $(CONFIG) --listen $(LISTEN) --metrics $(METRICS) --certs $(CERTS)

# Installs the system packages the tests need when missing (scripts/install-test-deps says which).
# The compose tests (tests/deploy/test_compose_up.py, test_compose_fleet.py) need a container engine, the Debian
# base image and the image's wheels: the three scripts set them up (and say so) when missing.
# `--durations=25`: the log ends with the 25 slowest tests, so a CI log shows where the
# wall time (held under 30 minutes, issue 49) goes. The unit tests (test-unit's selection)
# run first on two processes, then the rest with them left out (tests/conftest.py), also
# on two, each file on one, then the container tests on one (D700); with PYTEST_ARGS, one
# run of what they select.
test: install
	@sh scripts/install-test-deps
	@scripts/container-engine start
	@scripts/base-image
	@scripts/wheelhouse
ifeq ($(strip $(PYTEST_ARGS)),)
	$(BIN)/python -m pytest -p no:cacheprovider -n 2 --ignore=tests/e2e -m "$(UNIT_MARKS)"
	EGRESS_UNIT_TESTS_DONE=1 $(BIN)/python -m pytest -n 2 --dist loadfile -m "not container" --durations=25
	E2E_FAST_PATH=1 $(BIN)/python -m pytest -n 2 --dist loadfile -m "both_paths and not slow" --durations=10 tests/e2e
	$(BIN)/python -m pytest -m container --durations=25
else
	$(BIN)/python -m pytest --durations=25 $(PYTEST_ARGS)
endif

# The quick loop: every test that needs no root, no network namespace and no container
# engine, on two processes, with coverage held to a floor per package (measured by
# this run only: the end-to-end suites exercise the launcher in child processes).
# Coverage uses Python 3.12's sys.monitoring (twice as fast as the tracer: 44 s, not 78 s).
UNIT_MARKS      := not netns and not slow and not container and not privileged
COVERAGE_FLOORS := proxy:92 addons:84 runtime:68 hookrunner:84 common:95
test-unit: install
	COVERAGE_CORE=sysmon $(BIN)/python -m pytest -p no:cacheprovider -n 2 --ignore=tests/e2e -m "$(UNIT_MARKS)" \
		--cov=proxy --cov=addons --cov=runtime --cov=hookrunner --cov=common --cov-report= $(PYTEST_ARGS)
	@for floor in $(COVERAGE_FLOORS); do \
		pkg=$${floor%%:*}; min=$${floor##*:}; \
		got=$$($(BIN)/python -m coverage report --include="$$pkg/*" --format=total); \
		echo "coverage $$pkg: $$got% (floor $$min%)"; \
		[ "$$got" -ge "$$min" ] || { echo "coverage of $$pkg is below its floor" >&2; exit 1; }; \
	done

lint: install
	$(BIN)/ruff check $(PACKAGES) sandbox_egress/*.py testbed tests demo bench
	$(BIN)/ruff format --check $(PACKAGES) sandbox_egress/*.py testbed tests demo bench
	$(BIN)/mypy -p sandbox_egress
	$(BIN)/mypy testbed bench demo

# The three scenarios of the source pages and an MCP budget, narrated (needs root:
# network namespaces). Offline: the upstreams are test servers in those namespaces.
demo: install
	$(BIN)/python -m demo

# Your environment file against a local test upstream in network namespaces it builds
# and removes: an allowed request, a refusal and the audit, offline (needs root;
# demo/tryout.py, D408). `make try CONFIG=my.yaml URL=https://api.example.com/v1/models`;
# the file's ${NAME} references come from $(ENV_FILE) and your environment, as for `make run`.
# CONFIG and URL reach it as single words, quoted for the shell (a URL's `&` or `;`; D516).
URL ?=
quoted = '$(subst ','\'',$(1))'
try: install
	@set -a; . ./$(ENV_FILE); set +a; \
	exec $(BIN)/python -m demo.tryout $(call quoted,$(CONFIG)) $(call quoted,$(URL))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Benchmarks against direct, bare mitmproxy and squid (docs/benchmarks.md); not part of
# `make test`. Needs root; installs hey, nginx and squid-openssl from apt when missing.
# Options: make bench BENCH_ARGS="--rounds 3 --only throughput --profile".
BENCH_ARGS ?=

.PHONY: bench
bench: install
	sh bench/install-deps
	$(BIN)/python -m bench $(BENCH_ARGS)
