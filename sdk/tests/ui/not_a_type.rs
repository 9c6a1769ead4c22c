// `export_charm!` takes a type, not a value.
charm_sdk::export_charm!("hello");

fn main() {}
