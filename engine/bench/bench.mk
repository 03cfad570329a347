# Included by engine/Makefile. `make bench` (top level: `make bench-engine`)
# runs cachetd and Debian's memcached side by side on W1-W4 of engine issue 2.
# It is a benchmark, not a test: `make check` never runs it, and a missed
# target prints MISS without failing. BENCH_QUICK=1 gives a ~2 minute pass.

.PHONY: bench bench-loadgen-test
bench: $(BUILD)/cachetd
	CACHETD=$(abspath $(BUILD)/cachetd) bench/bench-engine.sh

# The load generator's own unit tests (reply parser, key/value/Zipf
# generation, loopback-only target check).
bench-loadgen-test:
	cd bench/loadgen && CARGO_TARGET_DIR=$${CARGO_TARGET_DIR:-$(CURDIR)/bench/loadgen/target} cargo test --release --locked
