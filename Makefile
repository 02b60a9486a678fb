# stateful_tool — build, run, test, package. `make help` lists the targets.
CARGO ?= cargo
BIN := target/release/stateful-tool
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)

.PHONY: help build run test lint package bench marketplace-check bump debug fuzz clean

# The Debian packages the targets use; scripts/ensure-*.sh and scripts/build-arm64.sh install
# what is missing (as root) or name the command to run. `make help` and the README list them.
TEST_PACKAGES := redis-server redis-tools openssl strace postgresql postgresql-client chromium chromium-driver prometheus fonts-dejavu-core faketime python3
ARM64_PACKAGES := rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
# The key pair `make package` signs with: keys/ is ignored by git.
KEYGEN_HINT := $(BIN) keygen --out-dir keys

help:
	@echo "make run      - builds (the first release build takes about 20 minutes on 2 cores), starts the KV container"
	@echo "                (on-disk data in ./data), ingests one event twice (accepted, then duplicate) and completes it"
	@echo "make test     - the whole test suite (the first build takes about 20 minutes on 2 cores); installs the system"
	@echo "                packages below when missing (as root; otherwise it names the apt-get command)"
	@echo "make lint     - cargo fmt --check and clippy -D warnings"
	@echo "make package  - builds dist/stateful_tool-$(VERSION).difypkg and dist/stateful_trigger-$(VERSION).difypkg for amd64"
	@echo "                ARM64=1 adds the arm64 binary (a cross build of about 35 minutes on 2 cores; what releases ship)"
	@echo "                SIGNING_KEY=keys/stateful_tool_signing_key.private.pem also signs them (key pair: $(KEYGEN_HINT))"
	@echo "make bench    - benchmarks: plugin vs raw store, KV container durability"
	@echo "make debug    - run the plugin against a running Dify (remote debugging; fill .env first)"
	@echo "make fuzz     - coverage-guided fuzzing (needs nightly + cargo-fuzz; FUZZ_SECONDS per target, default 60)"
	@echo "make marketplace-check - reproduce the Dify marketplace pre-check on the package make package built"
	@echo "make bump VERSION=x.y.z - set the version in Cargo.toml, Cargo.lock and manifest.yaml"
	@echo
	@echo "System packages (Debian). make test uses: $(TEST_PACKAGES)"
	@echo "  install them ahead: sudo apt-get install -y $(TEST_PACKAGES)"
	@echo "make package ARM64=1 also uses: $(ARM64_PACKAGES)"
	@echo "  install them ahead: sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install -y $(ARM64_PACKAGES)"

build:
	@[ -x $(BIN) ] || echo "== building $(BIN) (release; the first build takes about 20 minutes on 2 cores, later ones seconds)"
	$(CARGO) build --release --locked

run: build
	BIN=$(BIN) ./scripts/demo.sh

test:
	@echo "== system packages the tests use (installed when missing; quick when present)"
	./scripts/ensure-redis.sh
	./scripts/ensure-postgres.sh
	./scripts/ensure-ui-tools.sh
	./scripts/ensure-faketime.sh
	./scripts/ensure-python.sh
	@echo "== cargo test (the first build of the tests takes about 20 minutes on 2 cores; the fault-injection"
	@echo "   tests' provoked ERROR/WARN logs are captured and shown only under a failing test)"
	$(CARGO) test --locked --workspace

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

package: build
	./scripts/package.sh

# The scale section's sizes (comma-separated; 10000000 takes 15–40 min and ~20 GB of /tmp).
SCALE_RECORDS ?= 1000000
# More of the bench's flags, e.g. BENCH_ARGS="--sections scale --scale-data /var/tmp/kv10m
# --scale-claim-secs 30" keeps the filled store for the next run to measure again.
BENCH_ARGS ?=
bench:
	./scripts/ensure-redis.sh
	./scripts/ensure-postgres.sh
	$(CARGO) build --release --locked --workspace --bins
	target/release/stateful-tool-bench --scale-records $(SCALE_RECORDS) --backends kv,redis,postgres $(BENCH_ARGS)

debug:
	@test -f .env || { echo "copy .env.example to .env and set REMOTE_INSTALL_KEY (Dify -> Plugins -> Debug)"; exit 1; }
	INSTALL_METHOD=remote $(CARGO) run --locked --quiet -- serve

# Checks the package that is there (CI checks the one it just built and signed); building it
# is `make package`'s job.
PACKAGE := dist/stateful_tool-$(VERSION).difypkg
marketplace-check:
	@test -f $(PACKAGE) || { echo "$(PACKAGE) is missing: run make package first" >&2; exit 1; }
	@test -x $(BIN) || { echo "$(BIN) is missing: run make build first" >&2; exit 1; }
	python3 scripts/marketplace_check.py $(PACKAGE) --bin $(BIN)

bump:
	./scripts/bump.sh $(VERSION)

fuzz:
	./scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	$(CARGO) clean
	rm -rf dist
