//! A word-at-a-time `memcmp` for charms in WebAssembly.
//!
//! Rust compares strings and byte slices through the C library's `memcmp`. wasi-libc's
//! compares one byte per iteration, about 22 instructions a byte once compiled, and a hook
//! compares many strings (its keys in every map lookup, texts it checks for change). With
//! the SDK's default feature `fast-memcmp`, a charm built for WebAssembly links this one
//! instead, which compares eight bytes at a time. A charm that provides its own turns the
//! feature off (`default-features = false`).

/// The first `n` bytes at `a` and at `b` compared as C's `memcmp` does: the difference of
/// the first pair of bytes that differ, each read as unsigned, or 0 if none does.
///
/// # Safety
///
/// `a` and `b` must each be valid for reads of `n` bytes.
///
/// ```
/// use charm_sdk::mem::compare;
///
/// let (a, b) = (b"stored-state-key-1", b"stored-state-key-2");
/// assert_eq!(unsafe { compare(a.as_ptr(), b.as_ptr(), a.len()) }, i32::from(b'1') - i32::from(b'2'));
/// assert_eq!(unsafe { compare(a.as_ptr(), b.as_ptr(), a.len() - 1) }, 0);
/// ```
#[inline]
pub unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n`, and both are valid for `n` bytes (the caller's contract).
        let (x, y) = unsafe {
            (
                u64::from_le(a.add(i).cast::<u64>().read_unaligned()),
                u64::from_le(b.add(i).cast::<u64>().read_unaligned()),
            )
        };
        if x != y {
            // Read little-endian, the first byte in memory is the lowest: the lowest bit
            // that differs is in the first byte that differs.
            let at = i + (x ^ y).trailing_zeros() as usize / 8;
            // SAFETY: `at < i + 8 <= n`.
            return unsafe { i32::from(*a.add(at)) - i32::from(*b.add(at)) };
        }
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// C's `memcmp`, in place of the C library's in a charm's instance.
///
/// # Safety
///
/// As [`compare`].
#[cfg(all(target_family = "wasm", feature = "fast-memcmp"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { compare(a, b, n) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::compare;

    fn sign(n: i32) -> std::cmp::Ordering {
        n.cmp(&0)
    }

    proptest! {
        #[test]
        fn compares_as_slices_do(
            common in proptest::collection::vec(any::<u8>(), 0..40),
            a in proptest::collection::vec(any::<u8>(), 0..40),
            b in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let a: Vec<u8> = common.iter().chain(&a).copied().collect();
            let b: Vec<u8> = common.iter().chain(&b).copied().collect();
            let n = a.len().min(b.len());
            let got = unsafe { compare(a.as_ptr(), b.as_ptr(), n) };
            prop_assert_eq!(sign(got), a[..n].cmp(&b[..n]));
            // C's result: the difference of the first differing bytes, unsigned.
            let want = a[..n].iter().zip(&b[..n]).find(|(x, y)| x != y)
                .map_or(0, |(x, y)| i32::from(*x) - i32::from(*y));
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn each_byte_of_a_word_decides() {
        for at in 0..19 {
            let a = [7u8; 19];
            let mut b = a;
            b[at] = 200;
            assert_eq!(
                unsafe { compare(a.as_ptr(), b.as_ptr(), 19) },
                7 - 200,
                "at {at}"
            );
            assert_eq!(
                unsafe { compare(b.as_ptr(), a.as_ptr(), 19) },
                200 - 7,
                "at {at}"
            );
            assert_eq!(unsafe { compare(a.as_ptr(), b.as_ptr(), at) }, 0, "at {at}");
        }
    }
}
