//! Converting a charm's metadata, as any component may declare it, into the model's: any
//! declaration gets a verdict, never a panic; what is accepted has every name present and
//! declared once, every default of its declared type, and is stored and read back (as the
//! stores keep it, JSON) unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|d: charm_host_fuzz::checks::Declared| charm_host_fuzz::checks::metadata(d));
