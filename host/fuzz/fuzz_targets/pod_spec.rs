//! The pod spec validator: any text a charm passes to `set-pod-spec` gets a verdict, never
//! a panic; and a spec it accepts is accepted again as it was stored.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| charm_host_fuzz::checks::pod_spec(data));
