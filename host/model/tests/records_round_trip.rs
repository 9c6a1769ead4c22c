//! Records read back exactly as written: found by the `records` fuzz target
//! (`host/fuzz`), each case a regression test.

use std::collections::BTreeMap;

use charm_model::ConfigValue;

/// An integer too large for 64 bits is read as a float; written back and read again it
/// must be the same float, or a setting would drift each time a store rewrote it.
#[test]
fn a_float_setting_reads_back_as_the_same_float() {
    for text in [
        r#"{"kind":222222222222222222222222}"#,
        r#"{"kind":2.2222222222222222e23}"#,
        r#"{"kind":0.1}"#,
        r#"{"kind":1.7976931348623157e308}"#,
    ] {
        let read: BTreeMap<String, ConfigValue> = serde_json::from_str(text).unwrap();
        let written = serde_json::to_string(&read).unwrap();
        let again: BTreeMap<String, ConfigValue> = serde_json::from_str(&written).unwrap();
        assert_eq!(again, read, "{text} was written as {written}");
    }
}
