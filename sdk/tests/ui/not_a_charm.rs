// A type that does not implement `Charm`: the error names the trait, at the type.
struct Forgotten;

charm_sdk::export_charm!(Forgotten);

fn main() {}
