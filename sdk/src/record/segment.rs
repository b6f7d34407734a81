//! Ring segment memory: how a segment's storage is made (a thread's first
//! segment on the heap, every later one an anonymous mapping of its own,
//! transparent huge pages from 2 MiB), mapped in ahead of its writer
//! (`prefault`, a step at a time), freed, and named in one word (its
//! address with log2 of its slots in the low bits) for the lock-free
//! hand-overs of the ring's spare and of the pool.
//!
//! A leaf: it knows no ring, no budget and no pool; those take storage
//! from here and account for its bytes themselves (`segment_bytes`).

use crate::record::sync::AtomicU64;

/// Maps the storage in now, on the cold path (a thread's first event), so
/// that the hot path takes no page fault on its first lap through the ring:
/// in a VM a fault costs microseconds, which spread over the 256 events of a
/// 4 KiB page is several times the cost of recording them. Rings of 2 MiB
/// and more ask for transparent huge pages (fewer faults, fewer TLB misses).
/// Best effort: where `madvise` says no, one word per page is written with
/// its own value.
#[cfg(all(target_os = "linux", not(ringtrace_loom), not(miri)))]
fn prefault(words: &[AtomicU64]) {
    const PAGE: usize = 4096;
    const MADV_POPULATE_WRITE: libc::c_int = 23; // Linux 5.14
    let start = words.as_ptr() as usize;
    let end = start + std::mem::size_of_val(words);
    let (a, b) = ((start + PAGE - 1) & !(PAGE - 1), end & !(PAGE - 1));
    if b > a {
        // SAFETY: [a, b) is whole pages inside the live allocation `words`
        // borrows. MADV_HUGEPAGE and MADV_POPULATE_WRITE change how it is
        // backed, never its contents, so a reader of any of its words (the
        // consumer, of published records) sees the same values.
        let populated = unsafe {
            if b - a >= HUGE_PAGE {
                libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE);
            }
            libc::madvise(a as *mut libc::c_void, b - a, MADV_POPULATE_WRITE) == 0
        };
        if populated && !touch_pages() {
            return;
        }
    }
    // A write that keeps the value: the range may hold records.
    for w in words.iter().step_by(PAGE / 8) {
        w.fetch_or(0, crate::record::sync::Ordering::Relaxed);
    }
}

#[cfg(not(all(target_os = "linux", not(ringtrace_loom), not(miri))))]
fn prefault(_words: &[AtomicU64]) {}

/// Tests: `prefault` maps in by writing a word per page even where
/// `MADV_POPULATE_WRITE` works (kernels before 5.14 and some sandboxes
/// refuse it), to test that fallback everywhere.
#[cfg(all(test, not(ringtrace_loom)))]
pub(crate) static TOUCH_PAGES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

#[cfg(all(test, target_os = "linux", not(ringtrace_loom), not(miri)))]
fn touch_pages() -> bool {
    TOUCH_PAGES.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(all(not(test), target_os = "linux", not(ringtrace_loom), not(miri)))]
fn touch_pages() -> bool {
    false
}

/// Bytes a segment of `words` slots takes from the budget.
pub(crate) fn segment_bytes(words: usize) -> u64 {
    (words * 8) as u64
}

/// Slots of a segment of at least `bytes` bytes: a power of two, at least 64.
pub(crate) fn words_for(bytes: usize) -> usize {
    (bytes / 8).clamp(64, 1 << 40).next_power_of_two()
}

/// Page size the mapped segments are multiples of. (Models: a small size,
/// so that their tiny rings have "mapped" segments, pooled as real ones.)
#[cfg(not(ringtrace_loom))]
pub(crate) const PAGE: usize = 4096;
#[cfg(ringtrace_loom)]
pub(crate) const PAGE: usize = 64;

/// Makes zeroed, mapped-in storage of `words` slots (a power of two).
///
/// A thread's first segment (512 bytes) comes from the heap, on its first event.
/// Every segment a ring grows into is a page multiple and gets an anonymous
/// mapping of its own: growing never touches the heap of the recording
/// thread, and freeing a segment gives its memory back to the system at
/// once. `None` if the system refuses the mapping.
pub(crate) fn alloc_storage(words: usize, mapped: bool) -> Option<*mut AtomicU64> {
    debug_assert!(words.is_power_of_two() && words >= 8);
    #[cfg(all(unix, not(ringtrace_loom), not(miri)))]
    if mapped {
        // SAFETY: a fresh private anonymous mapping: no address hint, no
        // file; the kernel picks the place and zero-fills it. Checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                words * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        if words * 8 >= HUGE_PAGE {
            // SAFETY: advice on the mapping just made, owned by no one else;
            // it changes how the pages will be backed, not their contents.
            // Best effort: where it is refused, pages are 4 KiB.
            unsafe { libc::madvise(p, words * 8, libc::MADV_HUGEPAGE) };
        }
        // The mapping is `words * 8` zeroed bytes, page-aligned (so aligned
        // for `AtomicU64`, which has the layout of `u64`; zero is a valid
        // value), owned by the caller from now on, who maps it in as it
        // goes (`Ring::grow`, `Ring::prefault_more`).
        return Some(p as *mut AtomicU64);
    }
    let _ = mapped;
    let layout = heap_layout(words);
    // SAFETY: `layout` has a non-zero size (`words >= 8`).
    let base = unsafe { std::alloc::alloc(layout) } as *mut AtomicU64;
    if base.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    for i in 0..words {
        // SAFETY: `i < words`: inside the fresh allocation, which is laid
        // out for `words` of them and aligned for one; nothing is there yet.
        unsafe { base.add(i).write(AtomicU64::new(0)) };
    }
    // SAFETY: the `words` slots were just initialised above.
    prefault(unsafe { std::slice::from_raw_parts(base, words) });
    Some(base)
}

/// Storage is aligned to this (mapped segments: to a page), so a spare
/// segment's size fits in the low bits of its address (`Ring::spare`).
const STORAGE_ALIGN: usize = 64;

/// The heap layout of a segment of `words` slots.
fn heap_layout(words: usize) -> std::alloc::Layout {
    std::alloc::Layout::array::<AtomicU64>(words)
        .and_then(|l| l.align_to(STORAGE_ALIGN))
        .expect("segment size")
}

/// Frees what `alloc_storage(words, mapped)` returned.
///
/// # Safety
/// `base` came from `alloc_storage` with these arguments, is freed once, and
/// no reference into it outlives this call.
pub(crate) unsafe fn free_storage(base: *mut AtomicU64, words: usize, mapped: bool) {
    #[cfg(all(unix, not(ringtrace_loom), not(miri)))]
    if mapped {
        // SAFETY: the caller's contract: our own mapping of this length.
        unsafe { libc::munmap(base as *mut libc::c_void, words * 8) };
        return;
    }
    let _ = mapped;
    // SAFETY: the caller's contract: `alloc_storage`'s heap allocation of
    // `heap_layout(words)`, its `words` slots initialised, freed once, no
    // reference left into it.
    unsafe {
        std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(base, words));
        std::alloc::dealloc(base as *mut u8, heap_layout(words));
    }
}

/// Makes a mapped segment of `words` slots (at least a page), not mapped
/// in: the pool's stock.
pub(crate) fn alloc_mapped(words: usize) -> Option<*mut AtomicU64> {
    debug_assert!(spare_is_mapped(words));
    alloc_storage(words, true)
}

/// Frees what `alloc_mapped(words)` returned (or any segment of `words`
/// slots that `is_mapped` says is mapped).
///
/// # Safety
/// As `free_storage`'s.
pub(crate) unsafe fn free_mapped(base: *mut AtomicU64, words: usize) {
    // SAFETY: the caller's contract.
    unsafe { free_storage(base, words, true) }
}

/// Maps in a whole segment of `words` slots the caller owns (no change to
/// its words' values).
pub(crate) fn map_in_segment(base: *mut AtomicU64, words: usize) {
    prefault_positions(base, words as u64 - 1, 0, words as u64);
}

/// Whether a segment of `words` slots (not a thread's first) is mapped.
pub(crate) fn is_mapped(index: u64, words: usize) -> bool {
    index > 0 && words * 8 >= PAGE
}

/// Whether a spare segment of `words` slots is mapped: it is never a
/// thread's first.
pub(crate) fn spare_is_mapped(words: usize) -> bool {
    is_mapped(1, words)
}

/// `Ring::spare`'s (and the pool's) word for the segment `base` of `words` slots.
pub(crate) fn pack_segment(base: *mut AtomicU64, words: usize) -> u64 {
    debug_assert!((base as usize).is_multiple_of(STORAGE_ALIGN) && words.is_power_of_two());
    base as usize as u64 | u64::from(words.trailing_zeros())
}

/// The segment (base, slots) of a non-zero `Ring::spare` (or pool) word.
pub(crate) fn unpack_segment(word: u64) -> (*mut AtomicU64, usize) {
    let tag = STORAGE_ALIGN as u64 - 1;
    ((word & !tag) as usize as *mut AtomicU64, 1 << (word & tag))
}

/// Segments of this size and more are backed by transparent huge pages where
/// the kernel allows: in a VM, mapping in 4 KiB pages costs many times as
/// much per byte (measured in BENCHMARKS.md, "Measured for design choices").
#[cfg(all(unix, not(ringtrace_loom), not(miri)))]
const HUGE_PAGE: usize = 2 << 20;

/// A mapped segment is mapped in this many words at a time, ahead of the
/// producer, on its slow path (256 KiB: tens of microseconds to zero, then
/// thousands of records on the fast path). Mapping a whole new segment at
/// once would stall the recording thread for milliseconds at 16 MiB, most
/// of it for room it may never use.
pub(crate) const PREFAULT_STEP_WORDS: u64 = 32 << 10;

/// Maps in the slots of positions `from..to` of the segment `base` of
/// `mask + 1` slots, at most one lap (they wrap once at most). Called with
/// a segment that stays alive for the call: the producer's own, or a spare
/// the consumer is preparing (see `Ring::prepare_spare`).
pub(crate) fn prefault_positions(base: *mut AtomicU64, mask: u64, from: u64, to: u64) {
    let len = mask + 1;
    debug_assert!(to <= from + len);
    let mut pos = from;
    while pos < to {
        let i = pos & mask;
        let n = (to - pos).min(len - i);
        // SAFETY: `base` is a segment of `len` slots alive for this call
        // (the producer's, see `Reservation::push`, or the spare the
        // consumer is preparing, see `Ring::prepare_spare`); `i + n <= len`,
        // so the slice is inside it. Mapping in changes no slot's value, and
        // every slot is an atomic, so a producer writing some meanwhile
        // races with nothing.
        prefault(unsafe { std::slice::from_raw_parts(base.add(i as usize), n as usize) });
        pos += n;
    }
}
