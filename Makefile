# outboxd — see README.md. `make demo` runs the main job, `make test` passes the tests; both
# install what they need on a fresh Debian/Ubuntu machine with Go.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
# The commit's time, given to every file of a release so that one commit builds the same bytes.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# The same flags as internal/release's LDFlags.
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN       := bin/outboxd
DEMO_BIN  := bin/outboxd-demo

.PHONY: all build release deps deps-demo test test-unit vet docs demo bench chaos chaos-eo effectively-once clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/outboxd

# Static binaries for linux/amd64, linux/arm64 and darwin/arm64 in tar.gz archives, an OCI image
# tarball (both Linux platforms under one index; no Docker engine needed) and SHA256SUMS, in dist/.
# See docs/getting-started/install.md. internal/release/release_test.go runs the same build.
release:
	$(GO) run ./internal/release/cmd/outboxd-release -version '$(VERSION)' -commit '$(COMMIT)' -created '$(SOURCE_DATE_EPOCH)' -out dist

deps:
	./scripts/install-deps.sh

vet:
	$(GO) vet ./...

# Everything, including the integration tests against a real MariaDB and kfake.
test: deps vet
	$(GO) test -count=1 -timeout 15m ./...
	# The concurrent core once more under the race detector.
	$(GO) test -count=1 -race -timeout 10m ./pipeline/... ./sink/... ./checkpoint/...
	# Each fuzz target briefly (go test -fuzz takes one package and one target per run), for
	# a count of inputs (about 5 s each here), not a duration: Go 1.26's fuzz coordinator can
	# fail a run with "context deadline exceeded" at the end of a -fuzztime duration, having
	# found nothing (golang/go#75804, fixed in Go 1.27; seen in CI on FuzzRoute).
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 20000x ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 200000x ./gtid/
	$(GO) test -run '^$$' -fuzz '^FuzzRoute$$' -fuzztime 40000x ./router/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime 40000x ./testenv/rocketmq/

# The generated references in docs/reference, from the code: configuration and metrics by
# internal/docgen, cli.md by cmd/outboxd's TestCLIReference (the commands' flag sets live in
# package main, which only its own tests can call). Tests fail when a committed page differs.
docs:
	$(GO) run ./internal/docgen
	$(GO) test -count=1 -run '^TestCLIReference$$' ./cmd/outboxd -args -update-docs

# Only what needs no server.
test-unit:
	$(GO) test -count=1 -short -timeout 5m ./...

# A throwaway MariaDB, an in-process Kafka (kfake), outboxd and a sample app; Ctrl-C stops all.
# The demo binary is built into bin/ and exec'd, not `go run`: go run exits 1 when its child is
# interrupted, which make reported as an error. The demo exits 0 after a clean stop; make itself,
# interrupted too, then ends as any Ctrl-C'd command does (status 130, no error message).
demo: deps-demo
	@echo "make demo: compiling outboxd and the demo; on a cold Go build cache this takes about 45 s, silently"
	@$(MAKE) --no-print-directory build
	$(GO) build -o $(DEMO_BIN) ./cmd/outboxd-demo
	exec $(DEMO_BIN) --outboxd $(BIN)

# Only what the demo needs (MariaDB), not the test tools.
deps-demo:
	./scripts/install-deps.sh --demo

# Throughput, latency, memory and a polling baseline on this machine (see bench/README.md); about
# 10 minutes. Quick: go run ./bench -out bench/results -rows 100000 -steady 5s -big-rows 100000
bench: deps build
	$(GO) run ./bench -out bench/results -outboxd $(BIN)

# Fault injection for 10 minutes (kill -9, MariaDB and broker restarts, TCP faults) with a
# verifying consumer; exits 1 on any lost or reordered event (see chaos/README.md). Flags:
# make chaos CHAOS_FLAGS='-duration 3m -seed 7'
CHAOS_FLAGS ?=
chaos: deps build
	$(GO) run ./chaos -outboxd $(BIN) -out bin/chaos-report.json $(CHAOS_FLAGS)

# The same in exactly-once mode (delivery: exactly_once, the checkpoint in a Kafka transaction,
# every row to Kafka, no RocketMQ faults); the verifier reads read_committed and the verdict
# says "duplicates seen by a read_committed consumer: N", any N above 0 failing the run.
# `make chaos CHAOS_DELIVERY=exactly_once` runs the same.
chaos-eo: deps build
	$(GO) run ./chaos -outboxd $(BIN) -out bin/chaos-eo-report.json -delivery exactly_once $(CHAOS_FLAGS)

# The consumer kit's end-to-end test at length: outboxd and the example consumer killed -9 again
# and again while 3000 paid orders are granted (about 3 minutes; `make test` runs 200).
effectively-once: deps
	$(GO) test -count=1 -timeout 15m -run '^TestEffectivelyOnce$$' ./e2e/ -args -effectively-once-orders 3000

clean:
	rm -rf bin data dist
