# Included by engine/Makefile. Benchmarks, not tests: `make check` never runs
# them. Top-level names in brackets.
#
#   make bench               [bench-engine] cachetd, memcached 1.6.45 and Debian's
#                            1.6.18 side by side: W1-W4 and seed 003. A missed
#                            target prints MISS without failing. BENCH_QUICK=1
#                            gives a ~5 minute pass. TLS=1: W1 only, cachetd -Z
#                            against memcached 1.6.45 -Z, beside the same two
#                            in plaintext (~2 minutes with BENCH_QUICK=1).
#   make bench-extstore      [bench-extstore] the same three servers with
#                            extstore (-o ext_path=...) on a loop-mounted ext4,
#                            each in a memory cgroup of its pod's size, against
#                            fio's O_DIRECT IOPS (bench/bench-extstore.sh; needs
#                            root and fio). A server that refuses the ext_*
#                            flags is reported "not run" and the target exits 1.
#                            BENCH_QUICK=1 gives a ~3 minute pass.
#   make bench-soak          [bench-soak] the TSan concurrent checker for
#                            SOAK_SECONDS (default 600); fails on any wrong value
#                            or sanitizer report (bench/soak.sh)
#   make bench-differential  [bench-differential] the long differential test
#                            against memcached 1.6.45: differential-long, with
#                            DIFF_SECONDS (default 1800 here), CACHET_DIFF_SEEDS /
#                            CACHET_DIFF_REQUESTS (tests/protocol/protocol.mk)
#   make bench-metrics       what the metrics port costs (docs/benchmarks.md,
#                            "Metrics endpoint cost")
#   make bench-loadgen-test  the load generator's own tests (part of `make check`)

# Where cargo builds the load generator: cached outside the clone when
# CACHET_CACHE is set (one directory per checkout: clones and worktrees share
# CACHET_CACHE, and cargo's release/cachet-loadgen would otherwise be whichever
# checkout built last), else in the gitignored loadgen/target. bench-engine.sh
# derives the same directory when run on its own.
LOADGEN_CHECKOUT_KEY = $(shell printf '%s' '$(CURDIR)' | sha256sum | cut -c1-12)
LOADGEN_TARGET_DIR ?= $(if $(CACHET_CACHE),$(CACHET_CACHE)/loadgen-target/$(LOADGEN_CHECKOUT_KEY),$(CURDIR)/bench/loadgen/target)
SOAK_SECONDS ?= 600

.PHONY: bench bench-loadgen-test bench-soak bench-differential
TLS ?= 0
bench: $(BUILD)/cachetd $(BUILD)/bench/tls_floor
	BENCH_TLS=$(TLS) CACHETD=$(abspath $(BUILD)/cachetd) TLS_FLOOR=$(abspath $(BUILD)/bench/tls_floor) \
	  CARGO_TARGET_DIR=$(LOADGEN_TARGET_DIR) bench/bench-engine.sh

# TLS=1: the crypto CPU per GET that any TLS server on this OpenSSL pays
# (bench/tls_floor.c), measured in the same run as the servers.
$(BUILD)/bench/tls_floor: bench/tls_floor.c
	@mkdir -p $(dir $@)
	$(CC) $(CACHET_CFLAGS) $(CFLAGS) -o $@ bench/tls_floor.c $(LDFLAGS) -lssl -lcrypto

.PHONY: bench-extstore
bench-extstore: $(BUILD)/cachetd
	CACHETD=$(abspath $(BUILD)/cachetd) CARGO_TARGET_DIR=$(LOADGEN_TARGET_DIR) bench/bench-extstore.sh

# The load generator's own tests: reply parser, key/value/Zipf generation,
# the rate search, loopback-only targets, and end-to-end runs against cachet-sink.
bench-loadgen-test:
	cd bench/loadgen && CARGO_TARGET_DIR=$(LOADGEN_TARGET_DIR) cargo test --release --locked

# The TSan build of the checker is built by the stress target itself, with the
# same flags as `make check` uses.
bench-soak:
	SOAK_SECONDS=$(SOAK_SECONDS) TSAN_CFLAGS="$(TSAN_CFLAGS) $(TEST_HOOKS)" bench/soak.sh

# differential-long belongs to the protocol tests; this only gives it a place
# among the benchmarks. Until it exists, say so instead of make's bare
# "No rule to make target". Among the benchmarks it runs 30 minutes, unless
# DIFF_SECONDS is given: some 100 seeds of 5,000 requests at the 16 s a seed
# took on a moderately busy machine, half a million requests (the hostile
# audit of issue 20 sent 132,000).
BENCH_DIFF_SECONDS := $(if $(filter command line environment,$(origin DIFF_SECONDS))$(CACHET_DIFF_SECONDS),$(DIFF_SECONDS),1800)
bench-differential:
	@grep -qsE '^differential-long[[:space:]]*:' $(MAKEFILE_LIST) || \
	  { echo "bench-differential: this engine has no 'differential-long' target yet (it runs the differential test against memcached 1.6.45 with CACHET_DIFF_SEEDS / CACHET_DIFF_REQUESTS); nothing was run"; exit 2; }
	$(MAKE) differential-long DIFF_SECONDS=$(BENCH_DIFF_SECONDS)

# `make bench-metrics`: what the metrics port costs (engine metrics issue):
# W1 pipelined with and without -o metrics_port, and with a scrape of
# /metrics every second, alternated in one run; BENCH_QUICK=1 ~2 minutes.
$(BUILD)/bench/latency_cost: bench/latency_cost.c $(BUILD)/obj/latency.o src/latency.h
	@mkdir -p $(dir $@)
	$(CC) $(CACHET_CFLAGS) $(CFLAGS) -o $@ bench/latency_cost.c $(BUILD)/obj/latency.o $(LDFLAGS) $(LDLIBS)

.PHONY: bench-metrics
bench-metrics: $(BUILD)/cachetd $(BUILD)/bench/latency_cost
	CACHETD=$(abspath $(BUILD)/cachetd) LATENCY_COST=$(abspath $(BUILD)/bench/latency_cost) \
	  CARGO_TARGET_DIR=$(LOADGEN_TARGET_DIR) bench/bench-metrics.sh

# `make bench-profiles` (issue 23): seed 003 with derived slab classes, the
# page mover by marginal gain and the miss-ratio curve's accuracy, side by side
# with memcached 1.6.45 in one run (PASS/MISS per part; BENCH_QUICK=1 ~16 minutes, BENCH_PARTS=b only (b)). Ports from BENCH_PORT_BASE.
.PHONY: bench-profiles
bench-profiles: $(BUILD)/cachetd
	python3 -m doctest bench/mcstats.py
	CACHETD=$(abspath $(BUILD)/cachetd) \
	  MEMCACHED=$${MEMCACHED_1645:-$$($$(git rev-parse --show-toplevel)/../shared/peers/build-memcached.sh)} \
	  python3 bench/profiles.py
