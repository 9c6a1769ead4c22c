//! The bundle parser: any text given as a bundle gets a verdict (a bundle, or problems
//! naming their lines), never a panic. Charms it names do not exist here, so every
//! bundle that names one is refused after its keys and values are checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| charm_host_fuzz::checks::bundle(data));
