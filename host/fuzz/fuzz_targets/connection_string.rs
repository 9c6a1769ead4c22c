//! The pgsql interface's libpq connection-string parser: any text a remote unit writes in
//! its bag gets a verdict, never a panic; what parses keeps its keywords when written back
//! through the builder.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| charm_host_fuzz::checks::connection_string(data));
