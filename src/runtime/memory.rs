//! Giving freed memory back to the system.
//!
//! A KB reload compiles the new KB on a blocking thread while the old one still serves, then
//! drops the old one: tens of MiB freed in the middle of glibc's heaps, which keep it resident
//! until something there is allocated again. Over a 2-minute soak's three reloads (556 entries)
//! the member's RSS rose from 70 to about 300 MiB in some runs and stayed near 115 in others.

/// Returns the free memory of every malloc arena to the system (glibc's `malloc_trim`), where
/// the allocator is glibc's; elsewhere nothing. Costs a walk of the heaps: call it after a large
/// release, not per record.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns whole free pages of glibc's heaps to the kernel; it
    // touches no live allocation and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
