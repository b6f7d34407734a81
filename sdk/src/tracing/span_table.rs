//! The table of live spans' state, shared by the
//! [subscriber](crate::Builder::subscriber) (its span ids are the table's ids) and
//! the [layer](crate::Builder::layer) (which maps the registry's ids to them): span
//! ids to slots, in safe code, with no shared write on the common path. A
//! span's state is built, changed and reused in its slot, never moved.
//!
//! * Slots live in pages that are never freed or moved: page `k` holds
//!   `FIRST_PAGE << k` slots, made on first use (`OnceLock`), so a slot's
//!   address is fixed and lookups take no table-wide lock.
//! * Each slot is its own small mutex; everything about a span (generation,
//!   handle count, metadata, state) is read and written under it, which makes
//!   a stale or forged id harmless: its generation does not match, and the
//!   lookup finds nothing.
//! * A span id is `generation << 32 | (index + 1)`: never 0, as `tracing`
//!   requires, and different for each reuse of a slot (until the slot's
//!   generation wraps after 2^31 reuses: the top bit of an id stays free).
//! * Freed slots go to the freeing thread's list and are reused by that
//!   thread first (spans are mostly closed where they were made); a thread
//!   that exits, or holds more than `2 * BATCH`, gives slots back to a shared
//!   list, which threads draw from in batches before taking fresh slots. So
//!   the table never holds more than the peak of live spans plus
//!   `2 * BATCH` per thread.

#![forbid(unsafe_code)]

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use tracing::Metadata;

/// The state of every span ringtrace records through `tracing`, one table
/// for the subscriber and the layer (a thread's free slots belong to one
/// table: see `LOCAL_FREE`).
pub(crate) static SPAN_STATES: SpanTable<super::bridge::SpanData> = SpanTable::new();

/// Slots in page 0; page `k` has `FIRST_PAGE << k`.
const FIRST_PAGE: usize = 256;
/// Pages: room for `FIRST_PAGE * (2^PAGES - 1)` live spans (over 10^9).
const PAGES: usize = 22;
/// Slots a thread takes from the shared free list at once.
const BATCH: usize = 64;

/// A live span as the table keeps it: `T` is the recorder's state.
pub(crate) struct Entry<T> {
    generation: u32,
    /// Handles not dropped yet; 0: the slot is free.
    pub(crate) refs: u32,
    pub(crate) meta: Option<&'static Metadata<'static>>,
    pub(crate) state: Option<T>,
}

/// A page of slots, each its own lock on cache lines of its own (threads
/// locking neighbouring slots do not contend).
type Page<T> = Box<[CachePadded<Mutex<Entry<T>>>]>;

/// What dropping a handle did. It holds no state: an enum carrying a
/// span's state (hundreds of bytes) was copied whole at each return, twice
/// per span, whichever variant it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Other handles remain (or the id was not live).
    Alive,
    /// That was the last handle: the slot is free.
    Freed,
}

pub(crate) struct SpanTable<T> {
    pages: [OnceLock<Page<T>>; PAGES],
    /// Slots handed out fresh so far.
    fresh: AtomicU32,
    /// Free slots of threads that exited.
    shared_free: Mutex<Vec<u32>>,
    /// Spans `insert` had no room for.
    not_stored: AtomicU64,
}

/// A thread's free slots; given back to the shared list when the thread exits.
struct LocalFree {
    slots: Vec<u32>,
    shared: &'static Mutex<Vec<u32>>,
}

impl Drop for LocalFree {
    fn drop(&mut self) {
        self.shared.lock().append(&mut self.slots);
    }
}

thread_local! {
    // The free list of the table this thread used first (there is one table
    // per process; a second one, in tests, uses its shared list only).
    static LOCAL_FREE: RefCell<Option<LocalFree>> = const { RefCell::new(None) };
}

/// Page and offset of slot `index`.
fn locate(index: u32) -> (usize, usize) {
    let n = index as usize / FIRST_PAGE + 1;
    let page = (usize::BITS - 1 - n.leading_zeros()) as usize;
    let offset = index as usize - FIRST_PAGE * ((1 << page) - 1);
    (page, offset)
}

impl<T> SpanTable<T> {
    pub(crate) const fn new() -> Self {
        SpanTable {
            pages: [const { OnceLock::new() }; PAGES],
            fresh: AtomicU32::new(0),
            shared_free: Mutex::new(Vec::new()),
            not_stored: AtomicU64::new(0),
        }
    }

    /// Spans not stored because the table was full (see `insert`).
    #[cfg(test)]
    pub(crate) fn not_stored(&self) -> u64 {
        self.not_stored.load(Ordering::Relaxed)
    }

    fn slot(&self, index: u32) -> Option<&Mutex<Entry<T>>> {
        let (page, offset) = locate(index);
        self.pages.get(page)?.get()?.get(offset).map(|s| &**s)
    }

    fn slot_or_make(&self, index: u32) -> Option<&Mutex<Entry<T>>> {
        let (page, offset) = locate(index);
        let page = self.pages.get(page)?.get_or_init(|| {
            (0..FIRST_PAGE << page)
                .map(|_| {
                    CachePadded::new(Mutex::new(Entry {
                        generation: 0,
                        refs: 0,
                        meta: None,
                        state: None,
                    }))
                })
                .collect()
        });
        page.get(offset).map(|s| &**s)
    }

    /// A free slot's index: this thread's, then the shared list's, then fresh.
    /// Inlined: a span's common case is one pop from this thread's list
    /// (the rest is out of line, cold).
    #[inline]
    fn take_index(&'static self) -> Option<u32> {
        let local = LOCAL_FREE.try_with(|l| {
            let mut l = l.borrow_mut();
            match l.as_mut() {
                Some(local) if std::ptr::eq(local.shared, &self.shared_free) => {
                    match local.slots.pop() {
                        Some(index) => Some(index),
                        None => self.refill(local),
                    }
                }
                _ => self.take_first(&mut l),
            }
        });
        match local {
            Ok(Some(index)) => Some(index),
            _ => self.take_fresh(),
        }
    }

    /// `take_index` with this thread's list empty: a batch from the shared
    /// list, if it has any.
    #[cold]
    #[inline(never)]
    fn refill(&'static self, local: &mut LocalFree) -> Option<u32> {
        let mut shared = self.shared_free.lock();
        let n = shared.len().min(BATCH);
        let at = shared.len() - n;
        local.slots.extend(shared.drain(at..));
        local.slots.pop()
    }

    /// `take_index` on a thread without a list yet (it gets one), or whose
    /// list belongs to another table (tests: the shared list only).
    #[cold]
    #[inline(never)]
    fn take_first(&'static self, l: &mut Option<LocalFree>) -> Option<u32> {
        let local = l.get_or_insert_with(|| LocalFree {
            slots: Vec::new(),
            shared: &self.shared_free,
        });
        if !std::ptr::eq(local.shared, &self.shared_free) {
            return self.shared_free.lock().pop(); // a second table (tests)
        }
        self.refill(local)
    }

    /// A slot never used yet.
    #[cold]
    #[inline(never)]
    fn take_fresh(&self) -> Option<u32> {
        let capacity = (FIRST_PAGE * ((1 << PAGES) - 1)) as u32;
        let index = self.fresh.fetch_add(1, Ordering::Relaxed);
        (index < capacity).then_some(index)
    }

    /// Inlined as `take_index` is: one push on this thread's list.
    #[inline]
    fn give_back(&'static self, index: u32) {
        let kept = LOCAL_FREE.try_with(|l| match l.borrow_mut().as_mut() {
            Some(local) if std::ptr::eq(local.shared, &self.shared_free) => {
                local.slots.push(index);
                if local.slots.len() >= 2 * BATCH {
                    self.pass_on(local);
                }
                true
            }
            _ => false,
        });
        if kept != Ok(true) {
            self.give_back_shared(index);
        }
    }

    /// A thread that closes more spans than it makes (one that joins
    /// workers, say) passes slots on to the shared list.
    #[cold]
    #[inline(never)]
    fn pass_on(&'static self, local: &mut LocalFree) {
        let at = local.slots.len() - BATCH;
        self.shared_free.lock().extend(local.slots.drain(at..));
    }

    /// A slot freed by a thread that is exiting or never took one.
    #[cold]
    #[inline(never)]
    fn give_back_shared(&self, index: u32) {
        self.shared_free.lock().push(index);
    }

    /// Stores a new span with one handle; its id, or `None` when the table
    /// is full (counted in [`not_stored`](Self::not_stored), for every
    /// caller).
    /// `init` makes the state in the slot (no move of it afterwards).
    #[inline]
    pub(crate) fn insert(
        &'static self,
        meta: &'static Metadata<'static>,
        init: impl FnOnce(&mut Option<T>),
    ) -> Option<u64> {
        let taken = self
            .take_index()
            .and_then(|i| Some((i, self.slot_or_make(i)?)));
        let Some((index, slot)) = taken else {
            self.full();
            return None;
        };
        let mut e = slot.lock();
        // Below 2^31: the top bit of an id is free (`sample::UNSAMPLED`).
        e.generation = (e.generation.wrapping_add(1) & 0x7fff_ffff).max(1);
        e.refs = 1;
        e.meta = Some(meta);
        init(&mut e.state);
        Some((e.generation as u64) << 32 | (index as u64 + 1))
    }

    #[cold]
    #[inline(never)]
    pub(super) fn full(&self) {
        self.not_stored.fetch_add(1, Ordering::Relaxed);
        crate::stats::counters::SPANS_NOT_STORED.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `f` on the live span `id`; `None` if there is none (closed, or
    /// an id this table never gave).
    #[inline]
    pub(crate) fn with<R>(&self, id: u64, f: impl FnOnce(&mut Entry<T>) -> R) -> Option<R> {
        let index = (id as u32).checked_sub(1)?;
        let slot = self.slot(index)?;
        let mut e = slot.lock();
        if e.generation != (id >> 32) as u32 || e.refs == 0 {
            return None;
        }
        Some(f(&mut e))
    }

    /// Drops a handle of span `id`. The last one runs `close` on its state
    /// (what closing the span writes, under the slot's lock: the one lock
    /// of a close) and frees its slot. A freed slot keeps a state `keep`
    /// accepts (it may settle the state in place to make it reusable), for
    /// the next span `insert` puts there to reuse in place; else the state
    /// is moved out and dropped, after the slot's lock is released.
    #[inline]
    pub(crate) fn release(
        &'static self,
        id: u64,
        close: impl FnOnce(&mut T),
        keep: impl FnOnce(&mut T) -> bool,
    ) -> Release {
        let mut dropped = None;
        let released = self.with(id, |e| {
            if e.refs > 1 {
                e.refs -= 1;
                return Release::Alive;
            }
            if let Some(state) = e.state.as_mut() {
                close(state);
            }
            e.refs = 0;
            e.meta = None;
            // Only a state to drop is moved out (a move copies the whole
            // state, hundreds of bytes, even to take a `None`).
            if e.state.as_mut().is_some_and(|s| !keep(s)) {
                dropped = e.state.take();
            }
            Release::Freed
        });
        match released {
            None => Release::Alive,
            Some(Release::Freed) => {
                self.give_back(id as u32 - 1);
                // Outside the slot's lock; a state kept (the common case)
                // costs a test here, not a call to drop an `Option`.
                if let Some(state) = dropped {
                    drop(state);
                }
                Release::Freed
            }
            Some(r) => r,
        }
    }

    /// Frees span `id`'s slot without locking it: the slot goes to this
    /// thread's free list as it is, and the `insert` that takes it next
    /// makes it a new span (a new generation; `init` resets or replaces the
    /// old state). For the layer, whose table ids never leave it: once its
    /// map entry is removed nothing looks the id up, and the caller knows
    /// the state has nothing to write or to count when dropped (not async,
    /// no flows, no fields pending). Until the slot is reused, an id forged
    /// to match it still finds the old state; heap memory the state holds
    /// (values past the inline ones) is freed then too.
    ///
    /// Must be called once per id, and never with [`release`](Self::release)
    /// or [`remove`](Self::remove) for the same id: a slot listed twice
    /// would be given to two spans.
    #[inline]
    pub(crate) fn recycle(&'static self, id: u64) {
        if let Some(index) = (id as u32).checked_sub(1) {
            self.give_back(index);
        }
    }

    /// Frees span `id`'s slot; returns its state (dropped by the caller,
    /// outside the slot's lock). Tests only: the subscriber frees a closed
    /// span's slot with [`release`](Self::release), which keeps its state
    /// in place for the next span.
    #[cfg(test)]
    pub(crate) fn remove(&'static self, id: u64) -> Option<T> {
        let state = self.with(id, |e| {
            e.refs = 0;
            e.meta = None;
            e.state.take()
        })?;
        self.give_back(id as u32 - 1);
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TestSite;
    static SITE: TestSite = TestSite;
    static META: Metadata<'static> = tracing::metadata! {
        name: "t",
        target: "t",
        level: tracing::Level::INFO,
        fields: &[],
        callsite: &SITE,
        kind: tracing::metadata::Kind::SPAN,
    };
    impl tracing::Callsite for TestSite {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            &META
        }
    }

    fn meta() -> &'static Metadata<'static> {
        &META
    }

    #[test]
    fn pages_cover_indices_without_gaps() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(255), (0, 255));
        assert_eq!(locate(256), (1, 0));
        assert_eq!(locate(256 + 511), (1, 511));
        assert_eq!(locate(256 + 512), (2, 0));
        let mut next = (0, 0);
        for i in 0..100_000u32 {
            let at = locate(i);
            assert_eq!(at, next, "index {i}");
            next = if at.1 + 1 == FIRST_PAGE << at.0 {
                (at.0 + 1, 0)
            } else {
                (at.0, at.1 + 1)
            };
        }
    }

    #[test]
    fn stale_and_forged_ids_find_nothing() {
        static TABLE: SpanTable<u32> = SpanTable::new();
        let a = TABLE.insert(meta(), |s| *s = Some(7)).unwrap();
        assert_eq!(TABLE.with(a, |e| *e.state.as_ref().unwrap()), Some(7));
        assert_eq!(TABLE.remove(a), Some(7));
        assert_eq!(TABLE.with(a, |_| ()), None, "closed");
        let b = TABLE.insert(meta(), |s| *s = Some(8)).unwrap();
        assert_eq!(b as u32, a as u32, "the slot is reused by this thread");
        assert_ne!(b, a, "with a new generation");
        assert_eq!(TABLE.with(a, |_| ()), None, "the old id stays dead");
        for forged in [0, 1, u64::MAX, 5 << 32 | 3, 1 << 32 | 4_000_000_000] {
            assert_eq!(TABLE.with(forged, |_| ()), None, "{forged:#x}");
        }
        assert_eq!(TABLE.with(b, |e| e.refs), Some(1));
    }

    #[test]
    fn a_full_table_counts_what_it_could_not_store() {
        // Its count goes to the process-wide one too: not while a session's
        // test counts it.
        #[cfg(feature = "enable")]
        let _one = crate::session::tests::serial();
        static TABLE: SpanTable<u32> = SpanTable::new();
        let a = TABLE.insert(meta(), |s| *s = Some(1)).unwrap();
        // As if every slot had been handed out.
        let capacity = (FIRST_PAGE * ((1 << PAGES) - 1)) as u32;
        TABLE.fresh.store(capacity, Ordering::Relaxed);
        assert_eq!(TABLE.insert(meta(), |s| *s = Some(2)), None);
        assert_eq!(TABLE.insert(meta(), |s| *s = Some(3)), None);
        assert_eq!(TABLE.not_stored(), 2);
        assert_eq!(TABLE.remove(a), Some(1)); // a freed slot is used again
        assert!(TABLE.insert(meta(), |s| *s = Some(4)).is_some());
        assert_eq!(TABLE.not_stored(), 2);
    }

    #[test]
    fn slots_freed_by_exited_threads_are_reused() {
        static TABLE: SpanTable<u32> = SpanTable::new();
        let ids: Vec<u64> = (0..1000)
            .map(|i| TABLE.insert(meta(), |s| *s = Some(i)).unwrap())
            .collect();
        std::thread::spawn(move || {
            for id in ids {
                TABLE.remove(id);
            }
        })
        .join()
        .unwrap();
        let fresh = TABLE.fresh.load(Ordering::Relaxed);
        std::thread::spawn(|| {
            for i in 0..1000 {
                TABLE.insert(meta(), |s| *s = Some(i)).unwrap();
            }
        })
        .join()
        .unwrap();
        assert_eq!(
            TABLE.fresh.load(Ordering::Relaxed),
            fresh,
            "no fresh slot taken"
        );
    }
}
