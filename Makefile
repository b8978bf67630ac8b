# `make help` lists the targets: every target with a `## ` comment shows up.
# Targets that need DynamoDB run their command through $(DYNAMO), which
# starts one local dynalite unless DYNAMODB_ENDPOINT is already set, and
# always stops it again.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO            ?= go
GO_PACKAGES   ?= ./...
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m
# go test starts packages in the order named: the lease package's tests take
# longest (about six minutes), so they start first and the other packages'
# tests run beside them rather than before them.
GO_TEST_PACKAGES ?= $(if $(filter ./...,$(GO_PACKAGES)),./lease $(GO_PACKAGES),$(GO_PACKAGES))
DYNAMO        := localstack/with-dynamodb.sh
LOCALSTACK    := localstack
# npm writes this file at the end of every install: it is the install stamp.
NODE_DEPS     := $(LOCALSTACK)/node_modules/.package-lock.json
# The dashboard's browser test: playwright-core (npm, pinned) drives Debian's
# chromium headless. CHROMIUM=PATH points it at another build.
BROWSER_DIR   := e2e/browser
BROWSER_DEPS  := $(BROWSER_DIR)/node_modules/.package-lock.json
BROWSER_TEST  := node --test $(BROWSER_DIR)/dashboard.test.mjs $(BROWSER_DIR)/dashboard_races.test.mjs $(BROWSER_DIR)/dashboard_refresh.test.mjs
CHROMIUM      ?= /usr/bin/chromium
export CHROMIUM

.PHONY: help deps test test-browser test-others screenshot chromium lint clean

help: ## List the targets
	@awk 'BEGIN { FS = ":.*## " } /^[A-Za-z0-9_.-]+:.*## / { printf "  %-13s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

deps: $(NODE_DEPS) $(BROWSER_DEPS) chromium ## Install what tests need: dynalite and playwright-core (npm ci), chromium, Go modules
	$(GO) mod download

$(NODE_DEPS): $(LOCALSTACK)/package.json $(LOCALSTACK)/package-lock.json
	cd $(LOCALSTACK) && npm ci --no-audit --no-fund
	@touch $@

$(BROWSER_DEPS): $(BROWSER_DIR)/package.json $(BROWSER_DIR)/package-lock.json
	cd $(BROWSER_DIR) && npm ci --no-audit --no-fund
	@touch $@

# Debian's chromium, installed with apt-get when it is missing and we are
# root; otherwise the browser test says how to get it (and fails under CI=true).
chromium:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the dashboard's browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "no browser at $(CHROMIUM): install Debian's chromium (apt-get install chromium) for the browser test"; \
	fi

# The Go tests keep both cores busy. The dashboard's browser test mostly
# waits (on its page's refreshes and on real leases' seconds), so it runs
# beside the CDK app's, the benchmarks' and the Lambdas' tests; each prints
# its output when it ends.
test: deps lint ## Lint, then run all tests: Go with the race detector, then the dashboard in headless chromium beside the CDK, benchmark and Lambda tests
	$(GO) vet $(GO_PACKAGES)
	$(DYNAMO) $(GO) test $(GO_TEST_FLAGS) $(GO_TEST_PACKAGES)
	$(MAKE) --no-print-directory -j2 --output-sync=target test-browser test-others

test-others: $(NODE_DEPS) ## Run the CDK app's tests, the benchmarks' tests and every Lambda under the emulator
	cd infra && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd bench && $(GO) vet ./... && ../$(DYNAMO) $(GO) test -count=1 ./...
	$(MAKE) --no-print-directory lambda-test

test-browser: $(NODE_DEPS) $(BROWSER_DEPS) chromium ## Run only the dashboard's browser test (screenshots in e2e/browser/out/)
	$(DYNAMO) $(BROWSER_TEST)

screenshot: $(NODE_DEPS) $(BROWSER_DEPS) chromium ## Run the browser test and refresh the README's ui/dashboard.png
	CHECKOUT_UPDATE_SCREENSHOT=1 $(DYNAMO) $(BROWSER_TEST)

# The linters are pinned in internal/tools (a module of their own, so they
# stay out of the product's go.mod); .golangci.yaml lists what runs and why.
LINT_TOOL := $(GO) tool -modfile=$(CURDIR)/internal/tools/go.mod

lint: ## gofmt, go vet, golangci-lint and staticcheck on the product, infra/ and bench/
	@unformatted=$$(find . \( -name node_modules -o -name cdk.out -o -name .git \) -prune -o -name '*.go' -print | xargs gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt -w needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(GO_PACKAGES)
	$(GO) vet -tags lambdatest ./functions/internal/lambdatest/
	$(LINT_TOOL) golangci-lint run --allow-serial-runners $(GO_PACKAGES)
	$(LINT_TOOL) staticcheck $(GO_PACKAGES)
	cd infra && $(LINT_TOOL) golangci-lint run --allow-serial-runners ./...
	cd bench && $(LINT_TOOL) golangci-lint run --allow-serial-runners ./...

clean: ## Remove build output and installed node modules (local data in .dynalite/ is kept)
	rm -rf bin dist $(LOCALSTACK)/node_modules $(BROWSER_DIR)/node_modules $(BROWSER_DIR)/out

# The local service and the Lambda functions. Each function is a
# dist/<name>/bootstrap for the provided.al2023 runtime on arm64.
FUNCTIONS    := health agents tasks checkouts claim inbox authorizer sweeper stream notices
DIST         := dist
LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags="-s -w"

.PHONY: run build install lambda-test

# The version checkout --version prints: the commit, stamped at install
# (Go's own build information fills in the rest, and the version when this
# is not a git checkout).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)

install: ## Install checkout and checkout-server into GOBIN (default: GOPATH/bin) and say whether it is on PATH
	$(GO) install $(if $(VERSION),-ldflags "-X main.version=$(VERSION)") ./cmd/checkout ./cmd/checkout-server
	@bin=$$($(GO) env GOBIN); [ -n "$$bin" ] || bin=$$($(GO) env GOPATH | cut -d: -f1)/bin; \
	echo "installed $$bin/checkout and $$bin/checkout-server"; \
	case ":$$PATH:" in *":$$bin:"*) ;; *) echo "$$bin is not on PATH: add   export PATH=\"$$bin:\$$PATH\"   to your shell's profile";; esac

run: $(NODE_DEPS) ## Run the service on CHECKOUT_ADDR (default 127.0.0.1:3100), with its own dynalite unless DYNAMODB_ENDPOINT is set
	$(GO) build -o bin/checkout-server ./cmd/checkout-server
	exec bin/checkout-server

build: ## Build every Lambda as dist/<name>/bootstrap (linux/arm64, stripped) and print the sizes
	@for fn in $(FUNCTIONS); do \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build $(LAMBDA_FLAGS) -o $(DIST)/$$fn/bootstrap ./functions/$$fn; \
		size=$$(wc -c < $(DIST)/$$fn/bootstrap); \
		awk -v f="$(DIST)/$$fn/bootstrap" -v s="$$size" 'BEGIN { printf "  %-28s %9d bytes  %5.1f MiB\n", f, s, s / 1048576 }'; \
	done

# The real bootstraps under the AWS Lambda Runtime Interface Emulator: every
# function built for this machine with the flags of `make build`, the
# emulator built from the version pinned in its own module (so it stays out
# of the service's go.mod), both run against one local DynamoDB.
HOST_DIST  := bin/lambda
RIE        := bin/aws-lambda-rie
RIE_MODULE := functions/internal/lambdatest/tools

lambda-test: $(NODE_DEPS) ## Run every Lambda bootstrap (built for this machine) under the Lambda emulator; prints cold starts and memory
	@for fn in $(FUNCTIONS); do \
		CGO_ENABLED=0 $(GO) build $(LAMBDA_FLAGS) -o $(HOST_DIST)/$$fn/bootstrap ./functions/$$fn; \
	done
	cd $(RIE_MODULE) && CGO_ENABLED=0 $(GO) build -trimpath -o $(abspath $(RIE)) github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
	$(GO) vet -tags lambdatest ./functions/internal/lambdatest/
	CHECKOUT_LAMBDA_BIN=$(abspath $(HOST_DIST)) CHECKOUT_RIE=$(abspath $(RIE)) \
		$(DYNAMO) $(GO) test -tags lambdatest -count=1 -v ./functions/internal/lambdatest/

# The CDK app (infra/, its own Go module) and the pinned CDK CLI (infra/_cdk;
# the leading underscore keeps the CLI's node_modules out of `go ./...`).
CDK_DIR   := infra/_cdk
CDK       := $(CDK_DIR)/node_modules/.bin/cdk
CDK_DEPS  := $(CDK_DIR)/node_modules/.package-lock.json
CDK_ENV   := CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=1 JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20
# Extra CDK arguments, for example CDK_FLAGS="-c tablePrefix=dev- -c deletionProtection=false".
CDK_FLAGS ?=

.PHONY: synth deploy destroy adopt-tables

$(CDK_DEPS): $(CDK_DIR)/package.json $(CDK_DIR)/package-lock.json
	cd $(CDK_DIR) && npm ci --no-audit --no-fund
	@touch $@

synth: $(CDK_DEPS) ## Synthesize the CloudFormation template into cdk.out/ (offline; no AWS account needed)
	$(CDK_ENV) $(CDK) synth --no-notices --quiet $(CDK_FLAGS)

deploy: build $(CDK_DEPS) ## Build the functions and deploy the stack to AWS (CDK_FLAGS="-c key=value ...")
	$(CDK_ENV) $(CDK) deploy --no-notices -c requireBuild=true $(CDK_FLAGS)

destroy: $(CDK_DEPS) ## Delete the stack (tables under deletion protection are kept)
	$(CDK_ENV) $(CDK) destroy --no-notices $(CDK_FLAGS)

# After a destroy that kept the tables, a new stack with the same tablePrefix
# would collide with them: this creates the stack with only the kept tables,
# imported (cdk import, mapping from cdk.out/tables-import.json); `make
# deploy` then adds everything else. DEPLOY.md, "Destroy and redeploy".
adopt-tables: $(CDK_DEPS) ## Take tables kept by `make destroy` into a new stack (same CDK_FLAGS), then run `make deploy`
	$(CDK_ENV) $(CDK) synth --no-notices --quiet $(CDK_FLAGS)
	$(CDK_ENV) $(CDK) import --no-notices --resource-mapping cdk.out/tables-import.json $(CDK_FLAGS)

# Proof of the claims: benchmarks against cirello.io/dynamolock/v2 (bench/ is
# its own module, so the peer stays out of the product's go.mod), the long
# linearizability and fault runs, and fuzzing.
FUZZTIME ?= 30s
BENCH_OUT ?=

.PHONY: bench bench-quick chaos fuzz

# BENCH_FLAGS=-no-drain leaves out the queue-drain run.
BENCH_FLAGS ?=

bench: $(NODE_DEPS) ## Benchmark against dynamolock on one dynalite, full counts (a few minutes; BENCH_OUT=FILE keeps the report)
	cd bench && ../$(DYNAMO) $(GO) run ./cmd/bench $(BENCH_FLAGS) $(if $(BENCH_OUT),-out $(abspath $(BENCH_OUT)))

bench-quick: $(NODE_DEPS) ## The same benchmark with small counts (well under a minute)
	cd bench && ../$(DYNAMO) $(GO) run ./cmd/bench -quick

CHAOS_LAGS ?= 0s 50ms 500ms
# The whole-service linearizability tests once more with a client that
# loses this fraction of first sendings (dropped, or their answers thrown
# away), which the SDK (or the store) then sends again; without -race,
# whose slowness would hide the races that matter here.
CHAOS_LOSE ?= 0.3
CHAOS_LOSE_TESTS = TestLinearizabilityClaim$$|TestLinearizabilityWorkGraph$$|TestLinearizabilityWatchForceRemove$$
# A refused history's dumps (the whole history, the failing segment and
# the states it starts from, the trails) go under CHAOS_DUMPS, one
# folder per lag: a failure under load may not recur with its seed.
CHAOS_DUMPS ?= $(or $(TMPDIR),/tmp)/checkout-chaos

chaos: $(NODE_DEPS) ## Long linearizability and fault-injection runs (CHECKOUT_CHAOS=1), under each index lag of CHAOS_LAGS
	for lag in $(CHAOS_LAGS); do \
		echo "index lag $$lag"; \
		mkdir -p $(CHAOS_DUMPS)/$$lag; \
		CHECKOUT_CHAOS=1 CHECKOUT_TEST_INDEX_LAG=$$lag CHECKOUT_LIN_DUMP=$${CHECKOUT_LIN_DUMP:-$(CHAOS_DUMPS)/$$lag/d} $(DYNAMO) $(GO) test -race -count=1 -timeout 30m -v -run 'Linearizab|TestRace|TestConcurrent' ./lease/ || { echo "dumps of a refused history, if any: $(CHAOS_DUMPS)/$$lag"; exit 1; }; \
	done
	@echo "lost sendings: CHECKOUT_LIN_LOSE=$(CHAOS_LOSE), index lag 50ms"
	mkdir -p $(CHAOS_DUMPS)/lose
	CHECKOUT_CHAOS=1 CHECKOUT_TEST_INDEX_LAG=50ms CHECKOUT_LIN_LOSE=$(CHAOS_LOSE) CHECKOUT_LIN_DUMP=$${CHECKOUT_LIN_DUMP:-$(CHAOS_DUMPS)/lose/d} $(DYNAMO) $(GO) test -count=1 -timeout 30m -v -run '$(CHAOS_LOSE_TESTS)' ./lease/ || { echo "dumps of a refused history, if any: $(CHAOS_DUMPS)/lose"; exit 1; }
	CHECKOUT_CHAOS=1 $(DYNAMO) $(GO) test -race -count=1 -timeout 30m -v ./internal/faults/

fuzz: $(NODE_DEPS) ## Run every fuzz target for FUZZTIME each (default 30s); crashers land in testdata/fuzz
	@targets=$$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v node_modules | xargs -n1 dirname | sort -u); \
	for dir in $$targets; do \
		for fn in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "fuzz $$dir $$fn ($(FUZZTIME))"; \
			$(DYNAMO) $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$dir || exit 1; \
		done; \
	done
