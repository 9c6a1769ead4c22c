//! What a charm author sees when `export_charm!` or the `Charm` trait is misused: one error,
//! pointing at what they wrote. The expected messages are in `tests/ui/*.stderr`.

#[test]
fn misuse_is_refused_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
