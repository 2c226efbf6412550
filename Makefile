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

.PHONY: all build test fuzz bench demo dist vet clean

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
test: vet
	$(GO) test -count=1 ./...
	$(GO) test -run '^$$' -fuzz '^FuzzParseGPUs$$' -fuzztime $(FUZZTIME) ./internal/nvsmi
	$(GO) test -run '^$$' -fuzz '^FuzzParseProcesses$$' -fuzztime $(FUZZTIME) ./internal/nvsmi
	$(GO) test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME) ./internal/fetch
	$(GO) test -run '^$$' -fuzz '^FuzzMarkup$$' -fuzztime $(FUZZTIME) ./internal/render
	$(GO) test -run '^$$' -fuzz '^FuzzParsePS$$' -fuzztime $(FUZZTIME) ./internal/probe
	$(GO) test -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) ./internal/inifile
	$(GO) test -run '^$$' -fuzz '^FuzzParseCgroup$$' -fuzztime $(FUZZTIME) ./internal/attrib

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
	$(GO) test -run '^$$' -bench . -benchtime 5x ./internal/render
	$(GO) test -run '^$$' -bench Record -benchtime 10x ./internal/history
	$(GO) test -run '^$$' -bench Size -benchtime 1x ./internal/history
	$(GO) test -run '^$$' -bench Advance -benchtime 5x -benchmem ./internal/notify
	unshare --pid --fork --mount-proc env IDLEMON_CPU_WINDOW=60s $(GO) test -run '^$$' -bench . ./internal/idlemon

# A simulated fleet on 127.0.1.x, fetch and render over it (again every
# minute, as cron would), and the page on http://$(ADDR) until Ctrl-C.
demo: build
	@$(BIN)/demo -addr $(ADDR) -dir $(DEMO)

# Static idlemon binaries (no cgo) to copy to the GPU hosts.
dist:
	mkdir -p $(BIN)/linux-amd64 $(BIN)/linux-arm64
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/linux-amd64/idlemon ./cmd/idlemon
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/linux-arm64/idlemon ./cmd/idlemon

clean:
	rm -rf $(BIN) $(DEMO)
