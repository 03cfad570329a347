# Storage unit tests and the TSan concurrent checker. Included by
# engine/Makefile, so paths are relative to engine/.
#
#   make unit-tests          every tests/unit/test_*.c binary; the last line is
#                            the aggregate "N passed, N failed"
#   make stress              tests/stress/stress.c (build it with TSan:
#                            make BUILD=build/tsan CFLAGS=... LDFLAGS=... stress)
#   STRESS_ARGS="--seconds 20"  passes options through to the checker
#   make stress-ext          the checker again with extstore on (its file in
#                            $(BUILD)/stress-ext, on the clone's filesystem so that
#                            O_DIRECT is real): small pages evicted and rewritten
#                            under readers; 0 wrong values, and pages must have
#                            been evicted and values read back from disk

UNIT_TIMEOUT ?= 300
STRESS_ARGS ?=
# The checker stops its workers by its own clock, but a deadlock in storage (what
# it exists to find) would hang joining them: the outer bound turns that into a failure.
STRESS_TIMEOUT ?= 600
STRESS_EXT_SECONDS ?= 15

.PHONY: unit-tests
unit-tests: $(UNIT_TESTS)
	@pass=0; fail=0; bad=0; \
	for t in $(UNIT_TESTS); do \
	  echo "==> $$t"; \
	  timeout $(UNIT_TIMEOUT) $$t > $$t.log 2>&1; rc=$$?; cat $$t.log; \
	  last=$$(tail -n 1 $$t.log); \
	  p=$$(echo "$$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$$/\1/p'); \
	  f=$$(echo "$$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$$/\2/p'); \
	  if [ -z "$$p" ]; then echo "$$t: exited $$rc without a summary line"; bad=$$((bad+1)); p=0; f=1; fi; \
	  if [ $$rc -ne 0 ] && [ "$$f" = 0 ]; then echo "$$t: exit code $$rc"; f=1; fi; \
	  pass=$$((pass+p)); fail=$$((fail+f)); \
	done; \
	echo "$$pass passed, $$fail failed"; \
	[ $$fail -eq 0 ]

$(BUILD)/stress: tests/stress/stress.c $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CACHET_CFLAGS) -Itests/unit $(CFLAGS) -o $@ $< $(LIB_OBJS) $(LDFLAGS) $(LDLIBS)

.PHONY: stress
# Any sanitizer report fails the run at once (halt_on_error), whatever the
# checker itself concluded: a race is a defect even when no value came out wrong.
stress: $(BUILD)/stress
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 $${TSAN_OPTIONS:-}" timeout -k 10 $(STRESS_TIMEOUT) $(BUILD)/stress $(STRESS_ARGS)

.PHONY: stress-ext
stress-ext: $(BUILD)/stress
	@rm -rf $(BUILD)/stress-ext && mkdir -p $(BUILD)/stress-ext
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 $${TSAN_OPTIONS:-}" timeout -k 10 $(STRESS_TIMEOUT) $(BUILD)/stress --ext $(BUILD)/stress-ext --seconds $(STRESS_EXT_SECONDS) $(STRESS_EXT_ARGS)
	@rm -rf $(BUILD)/stress-ext
