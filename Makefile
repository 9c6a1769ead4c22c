# The two set-up commands: `make demo` runs the demo bundle, `make test` runs every test.

CHARMS := discourse postgresql
CARGO ?= cargo

.PHONY: demo test charms wasm-target etcd-deps

demo: charms
	$(CARGO) run --release -p charm-host -- run charms/demo.yaml --until-idle

# Every test, the etcd store's included: they start their own etcd on 127.0.0.1.
test: wasm-target etcd-deps
	$(CARGO) test --release --workspace --features charm-host/etcd,charm-tests/etcd

charms: wasm-target
	$(CARGO) build --profile charm --target wasm32-wasip2 $(addprefix -p ,$(CHARMS))
	mkdir -p charms/build
	cp $(foreach c,$(CHARMS),target/wasm32-wasip2/charm/$(c).wasm) charms/build/

wasm-target:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# The etcd backend builds its gRPC client with protoc; its tests run Debian's etcd. The
# metrics tests run Debian's prometheus and promtool.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
etcd-deps:
	@if ! command -v etcd >/dev/null || ! command -v protoc >/dev/null \
		|| ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then \
		echo "installing etcd-server, protobuf-compiler and prometheus for the tests"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq etcd-server protobuf-compiler prometheus; \
	fi
