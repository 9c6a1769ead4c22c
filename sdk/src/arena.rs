//! The hook arena: the charm's memory allocator in WebAssembly.
//!
//! Every hook runs in a fresh instance that the host throws away when the hook returns, so
//! memory never needs to be given back for a later hook. The arena hands out the first
//! [`ARENA_BYTES`] of a hook's allocations by bumping an offset: a few instructions instead
//! of a general allocator's bookkeeping, which was the largest single cost in a typical
//! hook's own code. Freeing the newest allocation (and growing it in place) takes the space
//! back, as strings and vectors built up one piece at a time do. Once the arena is used up,
//! allocations go to the standard allocator, so a hook that allocates and frees a lot in a
//! loop wastes at most the arena's size.
//!
//! It is the global allocator of a charm built for WebAssembly with the SDK's default
//! `hook-arena` feature. A charm that sets its own `#[global_allocator]` builds the SDK with
//! `default-features = false`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// How many bytes of a hook's allocations the arena serves before the standard allocator.
pub const ARENA_BYTES: usize = 1 << 20;

/// A bump allocator over `N` bytes of its own, falling back to [`System`].
///
/// Not thread-safe: a charm's instance runs one thread. The `Sync` it claims is what a
/// `static` needs; it must only be used from one thread, as `#[global_allocator]` in a
/// single-threaded WebAssembly instance is.
///
/// ```
/// use std::alloc::{GlobalAlloc, Layout};
/// use charm_sdk::arena::HookArena;
///
/// let arena = Box::new(HookArena::<64>::new());
/// let layout = Layout::from_size_align(16, 8).unwrap();
/// let a = unsafe { arena.alloc(layout) };
/// assert!(arena.contains(a));
/// assert_eq!(arena.used(), 16);
/// // Freeing the newest allocation takes its space back.
/// unsafe { arena.dealloc(a, layout) };
/// assert_eq!(arena.used(), 0);
/// ```
#[repr(C, align(16))]
pub struct HookArena<const N: usize> {
    bytes: UnsafeCell<[u8; N]>,
    /// The offset of the first free byte.
    next: UnsafeCell<usize>,
    /// The offset of the newest allocation, while it is still the newest.
    newest: UnsafeCell<Option<usize>>,
}

// SAFETY: see the type's documentation: used from one thread only.
unsafe impl<const N: usize> Sync for HookArena<N> {}

impl<const N: usize> Default for HookArena<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> HookArena<N> {
    /// An empty arena.
    pub const fn new() -> Self {
        HookArena {
            bytes: UnsafeCell::new([0; N]),
            next: UnsafeCell::new(0),
            newest: UnsafeCell::new(None),
        }
    }

    /// How many of its bytes are handed out (alignment padding included).
    pub fn used(&self) -> usize {
        // SAFETY: one thread; no reference into the cell outlives this read.
        unsafe { *self.next.get() }
    }

    /// Whether `ptr` points into the arena's bytes.
    pub fn contains(&self, ptr: *const u8) -> bool {
        let base = self.bytes.get() as usize;
        (base..base + N).contains(&(ptr as usize))
    }

    /// The offset of `ptr` if it is the newest allocation.
    fn newest_at(&self, ptr: *mut u8) -> Option<usize> {
        let base = self.bytes.get() as usize;
        // SAFETY: one thread.
        unsafe { *self.newest.get() }.filter(|&at| base + at == ptr as usize)
    }

    /// `size` bytes aligned to `align` from the arena, or `None` when they do not fit.
    fn bump(&self, size: usize, align: usize) -> Option<*mut u8> {
        let base = self.bytes.get() as usize;
        // SAFETY: one thread; the cells are only read and written here and in `dealloc`.
        unsafe {
            let next = *self.next.get();
            let start = (base + next).checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(size)?;
            if end > base + N {
                return None;
            }
            *self.next.get() = end - base;
            *self.newest.get() = Some(start - base);
            Some(start as *mut u8)
        }
    }
}

// SAFETY: the arena hands out disjoint, aligned ranges of its own bytes, each at most once
// until freed, and passes everything else to `System` unchanged.
unsafe impl<const N: usize> GlobalAlloc for HookArena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout.size(), layout.align()) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, as given.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.contains(ptr) {
            // SAFETY: not ours, so `System` allocated it with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        if let Some(at) = self.newest_at(ptr) {
            // SAFETY: one thread. The newest allocation ends at `next`: give it back.
            unsafe {
                *self.next.get() = at;
                *self.newest.get() = None;
            }
        }
        // Anything older stays used until the instance is thrown away.
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.contains(ptr) {
            // SAFETY: not ours, so `System` allocated it with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let base = self.bytes.get() as usize;
        if let Some(at) = self.newest_at(ptr)
            && at + new_size <= N
        {
            // SAFETY: one thread. The newest allocation grows or shrinks where it is.
            unsafe { *self.next.get() = at + new_size };
            debug_assert_eq!(base + at, ptr as usize);
            return ptr;
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the caller's
        // contract); the old block is `layout.size()` bytes of ours.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn allocations_are_aligned_disjoint_and_fall_back_when_full() {
        let arena = Box::new(HookArena::<256>::new());
        let a = unsafe { arena.alloc(layout(3, 1)) };
        let b = unsafe { arena.alloc(layout(8, 8)) };
        assert!(arena.contains(a) && arena.contains(b));
        assert_eq!(b as usize % 8, 0);
        assert!(b as usize >= a as usize + 3, "b overlaps a");
        let big = unsafe { arena.alloc(layout(512, 8)) };
        assert!(!big.is_null());
        assert!(!arena.contains(big), "too big for the arena: from System");
        unsafe {
            big.write_bytes(7, 512);
            arena.dealloc(big, layout(512, 8));
        }
    }

    #[test]
    fn the_newest_allocation_grows_in_place_and_older_ones_move() {
        let arena = Box::new(HookArena::<256>::new());
        let a = unsafe { arena.alloc(layout(8, 1)) };
        unsafe { a.copy_from(b"abcdefgh".as_ptr(), 8) };
        let grown = unsafe { arena.realloc(a, layout(8, 1), 32) };
        assert_eq!(grown, a, "the newest allocation grows where it is");
        assert_eq!(arena.used(), 32);
        let b = unsafe { arena.alloc(layout(4, 1)) };
        let moved = unsafe { arena.realloc(a, layout(32, 1), 64) };
        assert_ne!(moved, a, "an older allocation is copied");
        assert_eq!(unsafe { std::slice::from_raw_parts(moved, 8) }, b"abcdefgh");
        assert!(moved as usize > b as usize);
        // Moved past the arena's end: the copy comes from System, contents intact.
        let out = unsafe { arena.realloc(moved, layout(64, 1), 1024) };
        assert!(!arena.contains(out));
        assert_eq!(unsafe { std::slice::from_raw_parts(out, 8) }, b"abcdefgh");
        unsafe { arena.dealloc(out, layout(1024, 1)) };
    }

    #[test]
    fn only_the_newest_allocation_is_given_back() {
        let arena = Box::new(HookArena::<256>::new());
        let a = unsafe { arena.alloc(layout(16, 1)) };
        let b = unsafe { arena.alloc(layout(16, 1)) };
        unsafe { arena.dealloc(a, layout(16, 1)) };
        assert_eq!(arena.used(), 32, "an older allocation stays used");
        unsafe { arena.dealloc(b, layout(16, 1)) };
        assert_eq!(arena.used(), 16);
        let c = unsafe { arena.alloc(layout(16, 1)) };
        assert_eq!(c, b, "the space is handed out again");
    }
}
