# sluice — see README.md. `make dev` runs the pipeline on embedded defaults;
# `make test` installs/starts what the tests need and runs them all.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
PKGS := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FUZZTIME ?= 30000x
TEST_TIMEOUT ?= 20m

.PHONY: all build dev test test-deps test-go es-spec-summary fuzz lint bench bench-pipeline bench-ab soak docs clean

all: build

## build: the single binary at bin/sluice
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice ./cmd/sluice

## dev: build and run the whole pipeline in one process (sluice dev)
dev: build
	./$(BIN)/sluice dev

## test: install/start Postgres and MinIO if needed, then every test (race
## detector on), the fuzz targets for a short budget, and the docs check.
test: test-deps test-go es-spec-summary fuzz

test-deps:
	./scripts/test-deps.sh

# The run's events go to $(BIN)/test-events.json; skipcheck then fails when
# the tests that skipped differ from internal/testskip/allowlist.txt.
test-go:
	$(GO) vet $(PKGS)
	$(GO) -C esserver vet ./...
	./$(BIN)/gotestsum --jsonfile $(BIN)/test-events.json --format pkgname-and-test-fails --format-hide-empty-pkg -- -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	cd esserver && ../$(BIN)/gotestsum --jsonfile ../$(BIN)/test-events-esserver.json --format pkgname-and-test-fails --format-hide-empty-pkg -- -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cat $(BIN)/test-events.json $(BIN)/test-events-esserver.json > $(BIN)/test-events-all.json
	$(GO) run ./internal/testskip/skipcheck $(BIN)/test-events-all.json

# The Elasticsearch REST YAML suite ran inside test-go; print its count of
# cases run, passed and skipped (with reasons), which gotestsum hides on success.
es-spec-summary:
	@$(GO) -C esserver test -count=1 -run '^TestESRestSpecYAML$$' -v . | grep -E '^(es-rest-spec:|  skipped )'

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz-short.sh

## lint: gofmt, go vet, staticcheck
lint: test-deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	./$(BIN)/staticcheck $(PKGS)
	$(GO) -C esserver vet ./...
	cd esserver && ../$(BIN)/staticcheck ./...

## bench: benchmarks with the real components (Postgres, MinIO, kfake, ES test server);
## the growth benchmarks' sizes stop at SLUICE_BENCH_GROWTH_MAX (default 1000000;
## 10000000 adds the 10M-row registry, docs/benchmarks.md)
bench: test-deps
	GOGC=$${GOGC:-400} $(GO) test -run='^$$' -bench=. -benchtime=$${BENCHTIME:-3s} -timeout 30m $(PKGS) | tee $(BIN)/bench.txt
	cd esserver && GOGC=$${GOGC:-400} $(GO) test -run='^$$' -bench=. -benchtime=$${BENCHTIME:-3s} -timeout 30m ./... | tee -a ../$(BIN)/bench.txt
	@echo "results in $(BIN)/bench.txt; figures are recorded in docs/benchmarks.md"

## bench-pipeline: the pipeline as deployed (internal/pipelinebench): the four
## services, Kafka and the Elasticsearch server as separate processes, creates
## over HTTP in a closed loop (capacity C), then paced at 50 % and 80 % of C,
## on the file and the MinIO backend; visible/s, request-to-readable latency
## and the CPU per command by process, as metrics and a table.
## SLUICE_BENCH_PIPELINE_SECONDS is the length of each phase (default 10),
## SLUICE_BENCH_PIPELINE_CLIENTS the closed loop's clients (default 32).
bench-pipeline: test-deps
	$(GO) test -run='^$$' -bench='^BenchmarkPipelineProcesses$$' -benchtime=1x -timeout 30m ./internal/pipelinebench/ | tee $(BIN)/bench-pipeline.txt
	@echo "results in $(BIN)/bench-pipeline.txt"

## bench-ab: the main benchmarks of BASE (a git revision) and of this tree,
## alternated round by round in one run, with the pipeline as deployed of
## both binaries and head/base ratios per round (ROUNDS, BENCHES, PIPELINE:
## scripts/bench-ab.sh)
BASE ?= HEAD~1
bench-ab:
	./scripts/bench-ab.sh $(BASE)

## soak: the long chaos soak of the acceptance suite (docs/acceptance.md):
## SOAK of load and faults (default 10m), then drain and verify; then the
## poison soak: SLUICE_POISON_EVENTS normal commands (default 20000) with
## at least 1 % poison and kills. The short versions (45 s; a few hundred
## commands) run in `make test`.
SOAK ?= 10m
SLUICE_POISON_EVENTS ?= 20000
soak: test-deps
	SLUICE_SOAK=$(SOAK) $(GO) test -count=1 -run '^TestChaosSoak$$' -v -timeout 60m ./acceptance/
	SLUICE_POISON_EVENTS=$(SLUICE_POISON_EVENTS) $(GO) test -count=1 -run '^TestPoisonSoak$$' -v -timeout 120m ./acceptance/

## docs: regenerate docs/configuration.md from the code
docs: build
	./$(BIN)/sluice config docs > docs/configuration.md
	cp api/openapi.json docs/openapi.json

clean:
	rm -rf $(BIN)
