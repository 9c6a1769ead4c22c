//! A component that is not a charm: it exports `greet` and nothing of the charm world, and
//! imports an interface no charm host provides.

wit_bindgen::generate!({ path: "wit", world: "greeter" });

struct Greeter;

impl Guest for Greeter {
    fn greet(name: String) -> String {
        format!("{}, {name}", test::other::salutations::salutation())
    }
}

export!(Greeter);
