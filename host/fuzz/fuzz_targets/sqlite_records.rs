//! The SQLite store's decoding of its own rows: a model file whose rows were changed
//! behind the store's back (any text in any JSON or text column) gets a clear error on
//! the read that meets it, never a panic; and a store that reads it writes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| charm_host_fuzz::checks::sqlite_records(data));
