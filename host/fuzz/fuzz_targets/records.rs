//! Decoding the model's records as the stores keep them (JSON: etcd's values, SQLite's
//! JSON columns): any bytes get a verdict, never a panic; a record that decodes encodes to
//! the same record again, so nothing a store reads back changes by being written.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| charm_host_fuzz::checks::records(data));
