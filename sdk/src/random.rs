//! Secure random bytes, for passwords, keys and tokens.
//!
//! In the host, they come from WASI's `wasi:random/random`, which `charm-host` serves from
//! a cryptographically secure generator (ChaCha, seeded from the operating system's
//! source) kept by the host, never from the charm's own memory. In native tests they come
//! from the operating system's source. Either way they are unpredictable: a charm that
//! needs the same value in every unit generates it once, on the leader, and shares it
//! (leader data or a relation's application bag).
//!
//! ```
//! let password = charm_sdk::random::hex(16);
//! assert_eq!(password.len(), 32);
//! assert!(password.bytes().all(|b| b.is_ascii_hexdigit()));
//! assert_ne!(password, charm_sdk::random::hex(16));
//! ```

/// Fills `dest` with secure random bytes.
///
/// The host's source cannot fail; should the operating system's fail in a native test,
/// this panics (failing the hook) rather than hand out weaker bytes.
///
/// ```
/// let mut key = [0u8; 32];
/// charm_sdk::random::fill(&mut key);
/// assert_ne!(key, [0u8; 32]);
/// ```
pub fn fill(dest: &mut [u8]) {
    if let Err(e) = getrandom::fill(dest) {
        panic!("no secure random bytes: {e}");
    }
}

/// `len` secure random bytes.
///
/// ```
/// assert_eq!(charm_sdk::random::bytes(24).len(), 24);
/// ```
pub fn bytes(len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    fill(&mut out);
    out
}

/// `len` secure random bytes in lowercase hexadecimal (`2 * len` characters): a password or
/// token safe to put in a connection string or a config file.
///
/// ```
/// assert_eq!(charm_sdk::random::hex(8).len(), 16);
/// ```
pub fn hex(len: usize) -> String {
    bytes(len).iter().map(|b| format!("{b:02x}")).collect()
}
