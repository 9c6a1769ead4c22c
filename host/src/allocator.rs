//! The allocator of the host's programs: mimalloc, returning freed memory to the system at
//! once.
//!
//! A hook's snapshot, host calls and commit make about a hundred small allocations, for
//! which glibc's `malloc` and `free` cost several times as much (the memory store's
//! snapshot and commit: 20.1k instructions on glibc, 14.4k on mimalloc). mimalloc by
//! default keeps freed memory for 10 ms and returns it only when the thread that freed it
//! allocates again: compiling charms on blocking threads that then sit idle left the host's
//! peak resident memory a quarter higher than glibc's (a demo with ten hostile charms: a
//! median of 200 MiB against 150). [`configure`] makes it return freed memory at once,
//! which the hook path does not notice (its pages stay in use from one hook to the next).
//!
//! The library itself sets no global allocator: a program embedding `charm-host` chooses
//! its own. The `charm-host` binary and the benches declare this one and call [`configure`]
//! first thing.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOCATOR: charm_host::allocator::Allocator = charm_host::allocator::Allocator;
//!
//! fn main() {
//!     charm_host::allocator::configure();
//! }
//! ```

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};

/// The allocator to declare with `#[global_allocator]`.
pub use mimalloc::MiMalloc as Allocator;

/// `mi_option_purge_delay` in mimalloc 2's `mimalloc.h`: how many milliseconds freed memory
/// is kept before it is returned (10 by default; 0 returns it at once). The Rust binding
/// names no constant for it.
const PURGE_DELAY: mi_option_t = 15;

/// The environment variable with which an operator sets the purge delay instead.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// Makes mimalloc return freed memory to the system at once, unless the operator set
/// `MIMALLOC_PURGE_DELAY` in the environment (mimalloc reads it when the process starts).
/// Call it at the start of `main`, before other threads run: mimalloc's options are not
/// thread-safe to change.
pub fn configure() {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        // SAFETY: sets one option of mimalloc's, by its index in mimalloc 2's option table;
        // called before the program starts other threads.
        unsafe { mi_option_set(PURGE_DELAY, 0) };
    }
}

/// How many milliseconds mimalloc now keeps freed memory.
pub fn purge_delay_ms() -> std::ffi::c_long {
    // SAFETY: reads one option of mimalloc's.
    unsafe { mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_is_mimalloc_2s_option_15_and_configure_zeroes_it() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            return;
        }
        // mimalloc 2's default for the purge delay: another option at this index (the eager
        // commit delay before it is 1, the NUMA node count after it 0) would read otherwise.
        assert_eq!(purge_delay_ms(), 10);
        configure();
        assert_eq!(purge_delay_ms(), 0);
    }
}
