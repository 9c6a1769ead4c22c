//! The pod spec validator: any text a charm passes to `set-pod-spec` gets a verdict, never
//! a panic; and a spec it accepts is accepted again as it was stored.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A NUL splits the spec from the k8s resources, which a charm may pass beside it.
    let (spec, resources) = match text.split_once('\0') {
        Some((spec, resources)) => (spec, Some(resources)),
        None => (text, None),
    };
    if let Ok(write) = charm_model::podspec::validate(spec, resources) {
        let stored = serde_json::to_string(&write).expect("an accepted pod spec encodes");
        let again: charm_model::PodSpecWrite =
            serde_json::from_str(&stored).expect("a stored pod spec decodes");
        assert_eq!(again, write, "a stored pod spec reads back as written");
    }
});
