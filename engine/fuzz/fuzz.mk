# libFuzzer on the request parser (fuzz/fuzz_parser.c). Debian's clang ships
# libFuzzer; the target is built with ASan+UBSan so memory errors abort.
#   make fuzz-smoke                short pass (FUZZ_SMOKE_SECONDS, default 30), run by `make check`
#   make fuzz FUZZ_SECONDS=300     the long run
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 300
FUZZ_SMOKE_SECONDS ?= 30
FUZZ_FLAGS          = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                      -std=c11 -D_GNU_SOURCE -Isrc
FUZZ_BIN            = build/fuzz/fuzz_parser
FUZZ_WORK           = build/fuzz/corpus

$(FUZZ_BIN): fuzz/fuzz_parser.c src/proto_parser.c src/proto_parser.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ fuzz/fuzz_parser.c src/proto_parser.c

.PHONY: fuzz-smoke fuzz
fuzz-smoke: $(FUZZ_BIN)
	@mkdir -p $(FUZZ_WORK)
	@echo "fuzzing the request parser for $(FUZZ_SMOKE_SECONDS)s (seeds: fuzz/corpus)"
	nice $(FUZZ_BIN) -max_total_time=$(FUZZ_SMOKE_SECONDS) -max_len=4096 -dict=fuzz/memcached.dict \
	    -print_final_stats=1 -artifact_prefix=build/fuzz/ $(FUZZ_WORK) fuzz/corpus

fuzz: $(FUZZ_BIN)
	@mkdir -p $(FUZZ_WORK)
	@echo "fuzzing the request parser for $(FUZZ_SECONDS)s (seeds: fuzz/corpus)"
	nice $(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=70000 -dict=fuzz/memcached.dict \
	    -print_final_stats=1 -artifact_prefix=build/fuzz/ $(FUZZ_WORK) fuzz/corpus
