//! The pgsql interface's libpq connection-string parser: any text a remote unit writes in
//! its bag gets a verdict, never a panic; what parses keeps its keywords when written back
//! through the builder.
#![no_main]

use charm_pgsql::ConnectionString;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = text.parse::<ConnectionString>() else {
        return;
    };
    let params = parsed.params().clone();
    let _ = (parsed.host_name(), parsed.port_number(), parsed.database());
    let mut built = ConnectionString::new();
    for (keyword, value) in &params {
        built = built.param(keyword.clone(), value.clone());
    }
    let reparsed: ConnectionString = built
        .as_str()
        .parse()
        .unwrap_or_else(|e| panic!("{:?} (from {text:?}) does not parse: {e}", built.as_str()));
    assert_eq!(reparsed.params(), &params, "written back from {text:?}");
});
