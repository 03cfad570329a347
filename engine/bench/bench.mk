# Included by engine/Makefile. `make bench` (top level: `make bench-engine`)
# runs cachetd and Debian's memcached side by side on W1-W4 of engine issue 2.
# It is a benchmark, not a test: `make check` never runs it, and a missed
# target prints MISS without failing. BENCH_QUICK=1 gives a ~2 minute pass.

# Where cargo builds the load generator: cached outside the clone when
# CACHET_CACHE is set, else in the gitignored loadgen/target.
LOADGEN_TARGET_DIR ?= $(if $(CACHET_CACHE),$(CACHET_CACHE)/loadgen-target,$(CURDIR)/bench/loadgen/target)

.PHONY: bench bench-loadgen-test
bench: $(BUILD)/cachetd
	CACHETD=$(abspath $(BUILD)/cachetd) CARGO_TARGET_DIR=$(LOADGEN_TARGET_DIR) bench/bench-engine.sh

# The load generator's own tests: reply parser, key/value/Zipf generation,
# loopback-only targets, and end-to-end runs against cachet-sink.
bench-loadgen-test:
	cd bench/loadgen && CARGO_TARGET_DIR=$(LOADGEN_TARGET_DIR) cargo test --release --locked

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
