//! A cache prefetch hint, for code that knows which memory it will touch next.

/// Asks the processor to start loading the cache lines `value` occupies (its first 256
/// bytes at most), so a later read does not wait on memory. Only a hint: it reads nothing and changes
/// nothing. Does nothing on targets without a stable prefetch instruction.
///
/// The throttler uses it in [`Throttler::prefetch_hinted`](crate::Throttler::prefetch_hinted);
/// it is public for the frontier, which walks its scheduling structures one poll ahead.
///
/// ```
/// let states = vec![[0u64; 8]; 1000];
/// polite_throttle_core::hooks::prefetch(&states[500]);
/// assert_eq!(states[500][0], 0);
/// ```
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    let start = (value as *const T).cast::<u8>();
    // The size is a constant, so this unrolls into a few prefetches: one per 64 bytes
    // from the start, and the line of the last byte (a value need not start on a line).
    let size = core::mem::size_of::<T>().clamp(1, 4 * 64);
    prefetch_lines(start, size);
    if size > 1 {
        prefetch_line(start.wrapping_add(size - 1));
    }
}

/// Asks the processor to start loading the first `bytes` bytes of `value` (a part of a
/// large value whose other lines are rarely read; `value` starts a cache line).
#[inline(always)]
pub(crate) fn prefetch_prefix<T>(value: &T, bytes: usize) {
    let size = core::mem::size_of::<T>().min(bytes);
    prefetch_lines((value as *const T).cast::<u8>(), size);
}

/// Prefetches the line at `start` and one every 64 bytes after it, below `start + size`.
#[inline(always)]
fn prefetch_lines(start: *const u8, size: usize) {
    let mut offset = 0;
    while offset < size {
        prefetch_line(start.wrapping_add(offset));
        offset += 64;
    }
}

/// Asks the processor to start loading the cache line holding `p`.
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: PREFETCHT0 is a hint: it never faults and never changes memory, whatever
    // the address (even one outside any allocation), and SSE is in the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
