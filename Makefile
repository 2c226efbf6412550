# gpumon. `make demo` shows it working; `make test` runs every test.
GO      ?= go
BIN     := bin
DEMO    := demo
ADDR    ?= 127.0.0.1:8080
# Fuzz targets run by count (Nx), not duration: with a duration -fuzztime,
# Go 1.26's fuzz coordinator races its own deadline and, under CPU load, fails
# a target with a bare "context deadline exceeded" (golang/go#75804, fixed in
# Go 1.27). 5000x is a few seconds per target on 2 cores: under 1s for the
# parsers and FuzzBuild, about 3s for FuzzMarkup.
FUZZTIME ?= 5000x

.PHONY: all build test fuzz bench demo dist deb vet clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# Every test, then each fuzz target briefly ($(FUZZTIME): that many inputs).
# Tests that need what the machine may lack (root, a real sshd, chromium,
# promtool) skip, but fail under CI=true (internal/testenv.Need); .ci/run
# installs them.
# -timeout 30m: internal/pagetest alone takes about 4 minutes of chromium
# on 2 loaded cores (axe-core on a 1,000-host page), near go test's default
# 10 minutes a package.
test: vet
	$(GO) test -count=1 -timeout 30m ./...
	# idlemon once more on marks alone, its fallback where no cgroup can be made
	IDLEMON_TEST_CGROUP=off $(GO) test -count=1 ./internal/idlemon
	$(GO) test -run '^$$' -fuzz '^FuzzParseGPUs$$' -fuzztime $(FUZZTIME) ./internal/nvsmi
	$(GO) test -run '^$$' -fuzz '^FuzzParseProcesses$$' -fuzztime $(FUZZTIME) ./internal/nvsmi
	$(GO) test -run '^$$' -fuzz '^FuzzParsePmon$$' -fuzztime $(FUZZTIME) ./internal/nvsmi
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/kernlog
	$(GO) test -run '^$$' -fuzz '^FuzzParseAMDSMI$$' -fuzztime $(FUZZTIME) ./internal/rocm
	$(GO) test -run '^$$' -fuzz '^FuzzParseROCmSMI$$' -fuzztime $(FUZZTIME) ./internal/rocm
	$(GO) test -run '^$$' -fuzz '^FuzzParseKFD$$' -fuzztime $(FUZZTIME) ./internal/rocm
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJSON$$' -fuzztime $(FUZZTIME) ./internal/rocm
	$(GO) test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME) ./internal/fetch
	$(GO) test -run '^$$' -fuzz '^FuzzMarkup$$' -fuzztime $(FUZZTIME) ./internal/render
	$(GO) test -run '^$$' -fuzz '^FuzzStatusJSON$$' -fuzztime $(FUZZTIME) ./internal/render
	$(GO) test -run '^$$' -fuzz '^FuzzParsePS$$' -fuzztime $(FUZZTIME) ./internal/probe
	$(GO) test -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) ./internal/inifile
	$(GO) test -run '^$$' -fuzz '^FuzzParseCgroup$$' -fuzztime $(FUZZTIME) ./internal/attrib
	$(GO) test -run '^$$' -fuzz '^FuzzKnownIndex$$' -fuzztime $(FUZZTIME) ./internal/remote
	$(GO) test -run '^$$' -fuzz '^FuzzKnownIndexLines$$' -fuzztime $(FUZZTIME) ./internal/remote
	$(GO) test -run '^$$' -fuzz '^FuzzTextCellRoundTrip$$' -fuzztime $(FUZZTIME) ./internal/loaddata

# Every test, then each fuzz target for longer: 100000 inputs apiece (about
# 10s for the parsers and FuzzBuild, 1 to 3 minutes for FuzzMarkup on 2 cores;
# 300000x took FuzzMarkup 6 minutes, too near go test's 10-minute -timeout).
fuzz:
	$(MAKE) test FUZZTIME=100000x

# Benchmarks: fetch over the simulated fleet (1, 100, 1000 hosts) and over
# real sshd (30 hosts, against 30 OpenSSH clients); the parser; render;
# idlemon (as root, in a PID namespace of its own so that it scans only its
# own processes; CPU over 60 s in each state).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/fetch
	$(GO) test -run '^$$' -bench . ./internal/nvsmi
	$(GO) test -run '^$$' -bench . -benchmem ./internal/rocm
	$(GO) test -run '^$$' -bench . ./internal/kernlog
	$(GO) test -run '^$$' -bench . -benchtime 5x ./internal/render
	$(GO) test -run '^$$' -bench . -benchmem ./internal/loaddata
	$(GO) test -run '^$$' -bench . ./internal/sitefiles
	$(GO) test -run '^$$' -bench 'BenchmarkLive/render' -benchtime 30x ./cmd/fetch
	$(GO) test -run '^$$' -bench Record -benchtime 10x ./internal/history
	$(GO) test -run '^$$' -bench Size -benchtime 1x ./internal/history
	$(GO) test -run '^$$' -bench UsageBy -benchtime 2x ./internal/accounting
	$(GO) test -run '^$$' -bench Advance -benchtime 5x -benchmem ./internal/notify
	$(GO) test -run '^$$' -bench . -benchtime 100x ./internal/cgroup
	$(GO) test -run '^$$' -bench JobStart -benchtime 100x ./internal/supervisor
	$(GO) test -run '^$$' -bench . ./internal/idlemon/textfile
	unshare --pid --fork --mount-proc env IDLEMON_CPU_WINDOW=60s $(GO) test -run '^$$' -bench . ./internal/idlemon

# A simulated fleet on 127.0.1.x, fetch and render over it (again every
# minute, as cron would), and the page on http://$(ADDR) until Ctrl-C.
demo: build
	@$(BIN)/demo -addr $(ADDR) -dir $(DEMO)

# The version stamped into the binaries (`PROG -version`): git describe, e.g.
# 0.3.0-12-gabc1234 (a bare hash while there are no tags), "dev" outside git.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/gpumon/gpumon/internal/version.version=$(VERSION)
PROGS   := fetch render idlemon
ARCHES  := amd64 arm64

# Static binaries (no cgo), trimmed and stamped, for each architecture:
# bin/linux-ARCH/{fetch,render,idlemon}. Copy idlemon to the GPU hosts; or
# see `make deb`.
dist:
	@for arch in $(ARCHES); do \
		mkdir -p $(BIN)/linux-$$arch || exit 1; \
		for p in $(PROGS); do \
			echo "build $(BIN)/linux-$$arch/$$p $(VERSION)"; \
			CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -buildvcs=false -ldflags='$(LDFLAGS)' \
				-o $(BIN)/linux-$$arch/$$p ./cmd/$$p || exit 1; \
		done; \
	done

# Debian packages for each architecture, built by nfpm (a separate module,
# tools/go.mod, so that the main go.mod stays lean): bin/gpumon_V_ARCH.deb
# (fetch, render, the gpumon-live unit, /etc/gpumon/config.ini, the docs, the
# Prometheus rules) and bin/gpumon-idlemon_V_ARCH.deb. V is VERSION as a
# Debian version (dist/deb/debversion). Install with sudo dpkg -i.
DEB_VERSION ?= $(shell dist/deb/debversion $(VERSION))
MAINTAINER  ?= gpumon authors <gpumon@localhost>
# Every file in the packages gets the last commit's time: the same commit
# gives the same .deb, byte for byte (the binaries are reproducible too).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
NFPM        := $(BIN)/nfpm

$(NFPM): tools/go.mod tools/go.sum
	cd tools && $(GO) build -buildvcs=false -o ../$(NFPM) github.com/goreleaser/nfpm/v2/cmd/nfpm

deb: dist $(NFPM)
	@for arch in $(ARCHES); do \
		for pkg in gpumon gpumon-idlemon; do \
			ARCH=$$arch VERSION='$(DEB_VERSION)' MAINTAINER='$(MAINTAINER)' SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' \
				$(NFPM) package -f dist/deb/$$pkg.yaml -p deb -t $(BIN)/ || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN) $(DEMO)
