//! A charm of the `charm` world's shape at a contract version no host runs: its imports
//! name `juju:charm@9.9.9`.

wit_bindgen::generate!({ path: "wit", world: "juju:charm/charm@9.9.9" });

struct Unknown;

impl Guest for Unknown {
    fn metadata() -> String {
        juju::charm::log::log("metadata");
        "contract-unknown".into()
    }

    fn handle_hook() -> Result<(), String> {
        Ok(())
    }
}

export!(Unknown);
