# The two set-up commands: `make demo` runs the demo bundle, `make test` runs every test.

CHARMS := discourse postgresql
CARGO ?= cargo

.PHONY: demo test charms wasm-target

demo: charms
	$(CARGO) run --release -p charm-host -- run charms/demo.yaml --until-idle

test: wasm-target
	$(CARGO) test --release --workspace

charms: wasm-target
	$(CARGO) build --profile charm --target wasm32-wasip2 $(addprefix -p ,$(CHARMS))
	mkdir -p charms/build
	cp $(foreach c,$(CHARMS),target/wasm32-wasip2/charm/$(c).wasm) charms/build/

wasm-target:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
