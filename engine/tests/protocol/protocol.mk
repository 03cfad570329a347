# Protocol conformance: memccapable, pymemcache and raw-socket tests (pytest).
# Included by engine/Makefile, so paths are relative to engine/.
#
#   make conformance                               against $(BUILD)/cachetd (built first)
#   make conformance CACHETD=/abs/path/cachetd     against that binary (e.g. the ASan build)
#   make conformance CACHETD=/usr/bin/memcached    reference mode: the same tests against
#                                                  Debian's memcached; cachetd-only tests skip
#   make conformance PYTEST_ARGS="-k meta -x"      pass options through to pytest
#   make conformance PROTOCOL_TESTS=tests/protocol/test_x.py  run those files, paths from engine/ (default: the directory)
#
# The tests start their own servers on ports 21000-21999. The client library and
# pytest come from PyPI at pinned versions, in a venv named after the hash of the
# pins so a pin change never reuses a stale venv; it lives under CACHET_CACHE and
# is rebuilt when missing, so nothing relies on the cache existing.

CACHET_CACHE ?= $(HOME)/.cache/cachet
PROTOCOL_DIR := tests/protocol
PROTOCOL_PINS := $(PROTOCOL_DIR)/requirements.txt
PROTOCOL_VENV := $(CACHET_CACHE)/venv-$(shell sha256sum $(PROTOCOL_PINS) | cut -c1-16)
# Bounds the whole run; each test has its own bound in pytest.ini.
CONFORMANCE_TIMEOUT ?= 1500
PYTEST_ARGS ?=
# What pytest collects: the whole directory unless the caller names files, so
# `PROTOCOL_TESTS=tests/protocol/test_tls.py` (paths from engine/) runs one
# file without -k gymnastics.
PROTOCOL_TESTS ?= $(PROTOCOL_DIR)
# The tests mostly wait (timeouts, expiry, a flusher's pass): run them on
# several pytest-xdist workers, each with its own slice of the port range
# (conftest.py). PYTEST_WORKERS=0 runs them in this process, one at a time.
PYTEST_WORKERS ?= 4
PYTEST_XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist load)

ifeq ($(origin CACHETD),undefined)
CACHETD := $(CURDIR)/$(BUILD)/cachetd
CONFORMANCE_DEPS := $(BUILD)/cachetd
endif

# Built in a temporary directory and renamed, so an interrupted install or two
# runs at once never leave a half-made venv behind that looks ready.
$(PROTOCOL_VENV)/.ready: $(PROTOCOL_PINS)
	@echo "==> conformance venv $(PROTOCOL_VENV)"
	@mkdir -p $(CACHET_CACHE)
	@tmp=$(PROTOCOL_VENV).tmp.$$$$; rm -rf $$tmp; \
	  if python3 -m venv $$tmp && \
	     $$tmp/bin/pip install --quiet --disable-pip-version-check -r $(PROTOCOL_PINS) && \
	     touch $$tmp/.ready; then \
	    rm -rf $(PROTOCOL_VENV); mv $$tmp $(PROTOCOL_VENV) || rm -rf $$tmp; \
	  else rm -rf $$tmp; echo "conformance: could not build the venv"; exit 1; fi
	@test -f $@

.PHONY: conformance
conformance: $(PROTOCOL_VENV)/.ready $(CONFORMANCE_DEPS)
	@command -v memccapable >/dev/null || { echo "conformance: memccapable missing (run hack/install-deps.sh)"; exit 1; }
	@test -x "$(CACHETD)" || { echo "conformance: no server binary at CACHETD=$(CACHETD)"; exit 1; }
	@echo "==> conformance against $(abspath $(CACHETD))"
	CACHETD=$(abspath $(CACHETD)) timeout --kill-after=30 $(CONFORMANCE_TIMEOUT) \
	  $(PROTOCOL_VENV)/bin/python -m pytest -c $(PROTOCOL_DIR)/pytest.ini --rootdir=$(PROTOCOL_DIR) \
	  -v $(PYTEST_XDIST) $(PYTEST_ARGS) $(PROTOCOL_TESTS)

# The differential test for a bounded time: consecutive seeds against memcached
# 1.6.45 for DIFF_SECONDS (default 300), each seed printed as it finishes
# (`make bench-differential` runs this among the benchmarks; `make check` runs
# only the fixed seeds). CACHET_DIFF_FIRST_SEED picks the first seed (default:
# from the clock), CACHET_DIFF_REQUESTS the requests per seed (default 5000),
# CACHET_DIFF_SEEDS=a,b,... replays just those seeds. The run is bounded by
# DIFF_SECONDS plus the last seed's time (pytest --timeout, then `timeout`).
DIFF_SECONDS ?= $(or $(CACHET_DIFF_SECONDS),300)
.PHONY: differential-long
differential-long: $(PROTOCOL_VENV)/.ready $(CONFORMANCE_DEPS)
	@test -x "$(CACHETD)" || { echo "differential-long: no server binary at CACHETD=$(CACHETD)"; exit 1; }
	@echo "==> differential test against memcached 1.6.45 for $(DIFF_SECONDS) s, cachetd $(abspath $(CACHETD))"
	CACHETD=$(abspath $(CACHETD)) CACHET_DIFF_SECONDS=$(DIFF_SECONDS) \
	  CACHET_DIFF_SEEDS='$(CACHET_DIFF_SEEDS)' CACHET_DIFF_REQUESTS='$(CACHET_DIFF_REQUESTS)' \
	  CACHET_DIFF_FIRST_SEED='$(CACHET_DIFF_FIRST_SEED)' \
	  timeout --kill-after=30 $$(( $(DIFF_SECONDS) + 900 )) \
	  $(PROTOCOL_VENV)/bin/python -m pytest -c $(PROTOCOL_DIR)/pytest.ini --rootdir=$(PROTOCOL_DIR) \
	  -v -s --timeout=$$(( $(DIFF_SECONDS) + 600 )) $(PROTOCOL_DIR)/test_differential.py -k test_for_a_while
