//! One API, two backends: kv's scenarios, which `charms/kv/tests/harness.rs` runs natively,
//! run here against the compiled `kv.wasm` through the host, unchanged.

#[path = "../../charms/kv/tests/scenarios/mod.rs"]
mod scenarios;

use charm_tests::{WasmContext, guests, runtime};

#[test]
fn kv_scenarios_pass_against_the_wasm() {
    let runtime = runtime();
    let ctx = WasmContext::new(&runtime, guests::KV).expect("the guest loads");
    for (name, scenario) in scenarios::ALL {
        eprintln!("scenario {name}");
        scenario(&ctx);
    }
}
