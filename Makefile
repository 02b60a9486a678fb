# stateful_tool — build, run, test, package. `make help` lists the targets.
CARGO ?= cargo
BIN := target/release/stateful-tool
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)

.PHONY: help build run test lint package bench marketplace-check bump debug fuzz clean

help:
	@echo "make run      - start the KV container (on-disk data) and ingest one event twice: accepted, then duplicate"
	@echo "make test     - the whole test suite (installs redis-server, PostgreSQL, chromium and promtool if missing)"
	@echo "make lint     - cargo fmt --check and clippy -D warnings"
	@echo "make package  - build dist/stateful_tool-$(VERSION).difypkg (SIGNING_KEY=private.pem also signs it)"
	@echo "make bench    - benchmarks: plugin vs raw store, KV container durability"
	@echo "make debug    - run the plugin against a running Dify (remote debugging; fill .env first)"
	@echo "make fuzz     - coverage-guided fuzzing (needs nightly + cargo-fuzz; FUZZ_SECONDS per target, default 60)"
	@echo "make marketplace-check - reproduce the Dify marketplace pre-check on the package make package built"
	@echo "make bump VERSION=x.y.z - set the version in Cargo.toml, Cargo.lock and manifest.yaml"

build:
	$(CARGO) build --release --locked

run: build
	BIN=$(BIN) ./scripts/demo.sh

test:
	./scripts/ensure-redis.sh
	./scripts/ensure-postgres.sh
	./scripts/ensure-ui-tools.sh
	./scripts/ensure-faketime.sh
	$(CARGO) test --locked --workspace

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

package: build
	./scripts/package.sh

bench:
	./scripts/ensure-redis.sh
	./scripts/ensure-postgres.sh
	$(CARGO) build --release --locked --workspace --bins
	target/release/stateful-tool-bench

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
