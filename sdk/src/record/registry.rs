//! The thread registry: which ring each recording thread writes into, and the
//! hand-over of a ring when its thread exits.
//!
//! A thread gets its ring on its first event of a session (the only time it
//! takes a lock or allocates: the registry's lock once, around two pushes;
//! the allocations are made before it), if the process-wide budget has room for it
//! (`THREAD_BYTES` and a 512-byte first segment); else that event is dropped and
//! counted, and the next one tries again. The ring is shared, by `Arc`,
//! between:
//! * the thread, through the value of a pthread key (`OWNER_KEY`, whose
//!   destructor marks the ring retired at thread exit, after every
//!   `thread_local!` destructor has run, so events recorded from those still
//!   reach the ring), with a raw pointer cached in `CURRENT` for the hot path;
//! * the registry list (and the list of rings added since the flusher last
//!   took them, which it appends to its own copy). A retired ring stays
//!   listed until the flusher has drained it, so nothing a thread recorded is
//!   lost when it exits; dropping it gives its memory back to the budget.
//!
//! Each session has an id; a ring belongs to one session. A thread whose
//! cached ring is from an earlier session gets a fresh one on its next event.

use crate::record::budget::{Budget, DEFAULT_BUDGET_BYTES};
use crate::record::ring::Ring;
use crate::record::segment::{segment_bytes, words_for};
use crate::record::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};
use std::cell::Cell;

/// A recording thread's identity and mode: what the encoders see of it
/// (never its ring). A `ThreadRing` derefs to it.
pub(crate) struct ThreadInfo {
    /// Packet sequence id of this thread in the trace (unique in the session).
    pub(crate) seq_id: u32,
    pub(crate) pid: i32,
    pub(crate) tid: i64,
    pub(crate) name: String,
    /// The session is a flight recorder (set once, before the ring is shared).
    overwrite: bool,
}

impl ThreadInfo {
    /// Flight-recorder mode: the oldest records are overwritten when full.
    pub(crate) fn is_overwrite(&self) -> bool {
        self.overwrite
    }

    /// Thread `seq_id` (tid 2 of pid 1, named "t"), for unit tests of what
    /// reads threads' records.
    #[cfg(test)]
    pub(crate) fn for_test(seq_id: u32, overwrite: bool) -> ThreadInfo {
        ThreadInfo {
            seq_id,
            pid: 1,
            tid: 2,
            name: "t".into(),
            overwrite,
        }
    }
}

/// One thread's ring and identity.
pub(crate) struct ThreadRing {
    pub(crate) ring: Ring,
    /// Session this ring belongs to.
    pub(crate) session: u64,
    /// Who the thread is (`Deref`): all an encoder is shown.
    info: ThreadInfo,
    /// Set (Release) by the owning thread's exit; once seen (Acquire), every
    /// record the thread wrote is published.
    pub(crate) retired: AtomicBool,
    /// Open recorded scopes on this thread. Written only by the owner.
    pub(crate) depth: AtomicU32,
    /// Scope begins and ends also record the thread's CPU time (set once,
    /// before the ring is shared).
    pub(crate) thread_time: bool,
    /// Budget this thread's bookkeeping (`THREAD_BYTES`) was taken from.
    budget: &'static Budget,
}

impl std::ops::Deref for ThreadRing {
    type Target = ThreadInfo;

    fn deref(&self) -> &ThreadInfo {
        &self.info
    }
}

/// What a recording thread costs besides its ring's segments, taken from the
/// budget when its ring is made and given back when the flusher drops it:
/// this struct, and an allowance for the flusher's and the encoder's state
/// of the thread (sequence, interning tables, open scopes) and its entries
/// in the registry's lists and the flusher's (its list, its map by id and
/// set of active rings, the list of announced ids, with their spare
/// capacity): 768 bytes covers both (BENCHMARKS.md, "Measured for design
/// choices").
/// Nothing else of a thread that records through the macros is on the heap
/// (the `tracing` bridge's site cache is taken from the budget on its own,
/// see `take_thread_state`; the typed API's pool of field buffers and the
/// log message buffer are not yet counted): its thread-locals here
/// (`CURRENT`, `EXITED`, `NO_MEMORY`) are `const` and without destructor,
/// in the static TLS block every thread has whether it records or not, and
/// the key's value sits in glibc's thread descriptor.
pub(crate) const THREAD_BYTES: u64 = std::mem::size_of::<ThreadRing>() as u64 + 768;

/// Size of a thread's first ring segment: small, so that a thread that
/// records little holds little (64 words: a few scopes with arguments per
/// flusher pass; 10,000 such threads hold 5 MiB of it); the ring grows
/// (to a page first, then quadrupling: `Ring::next_words`) while it fills
/// faster than the flusher drains it, up to the per-thread cap.
pub(crate) const INITIAL_RING_BYTES: usize = 512;

/// Largest ring of a thread when the session does not say
/// (`Builder::buffer_bytes_per_thread`).
pub(crate) const DEFAULT_RING_BYTES: usize = 1 << 20;

impl Drop for ThreadRing {
    fn drop(&mut self) {
        self.budget.give_back(THREAD_BYTES);
    }
}

impl ThreadRing {
    /// A thread of sequence `seq_id` (tid 2 of pid 1, named "t") with a
    /// 64-word ring, for unit tests of what reads threads' records.
    #[cfg(test)]
    pub(crate) fn for_test(seq_id: u32, overwrite: bool) -> ThreadRing {
        let budget = Budget::leaked(u64::MAX);
        assert!(budget.try_take(THREAD_BYTES));
        let ring = Ring::with_words(64, overwrite);
        ThreadRing::new(ring, 1, seq_id, 1, 2, "t".into(), budget)
    }

    /// `ring`'s owner, whose `THREAD_BYTES` the caller took from `budget`.
    pub(crate) fn new(
        ring: Ring,
        session: u64,
        seq_id: u32,
        pid: i32,
        tid: i64,
        name: String,
        budget: &'static Budget,
    ) -> Self {
        ring.set_id(seq_id);
        ThreadRing {
            budget,
            ring,
            session,
            info: ThreadInfo {
                seq_id,
                pid,
                tid,
                name,
                overwrite: false,
            },
            retired: AtomicBool::new(false),
            depth: AtomicU32::new(0),
            thread_time: false,
        }
    }

    /// Hands the ring over at its thread's exit, and announces it if the
    /// flusher had found it drained (so that it visits it once more and
    /// forgets it).
    pub(crate) fn retire(&self) {
        // Release: pairs with the flusher's Acquire in `is_retired`; every
        // record this thread published happens-before the flag is seen.
        // `announce` fences it against `Ring::quiet`'s read of it (see
        // `record::ring::announce`).
        self.retired.store(true, Ordering::Release);
        self.ring.announce();
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Flusher: makes the ring quiet (not visited until it announces
    /// itself) if it holds nothing and its thread has not exited. Returns
    /// whether it is quiet.
    pub(crate) fn quiet(&self) -> bool {
        !self.is_retired() && self.ring.quiet(|| self.retired.load(Ordering::Relaxed))
    }
}

/// Settings for rings created during the current session.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingConfig {
    /// Largest ring of one thread (`buffer_bytes_per_thread`).
    pub(crate) bytes: usize,
    /// Process-wide budget of every thread's ring and bookkeeping (`buffer_bytes`).
    pub(crate) budget_bytes: u64,
    pub(crate) overwrite: bool,
    /// Record thread CPU time on scope begins and ends.
    pub(crate) thread_time: bool,
}

pub(crate) struct Registry {
    /// Id of the recording session; 0 when none.
    session: AtomicU64,
    /// The session's ring settings (`RingConfig`), stored before the
    /// session's id (Release) and read after it (Acquire): a thread's first
    /// event reads them without the lock.
    ring_bytes: AtomicU64,
    overwrite: AtomicBool,
    thread_time: AtomicBool,
    /// The next thread's sequence id (reset when a session opens).
    next_seq: AtomicU32,
    state: Mutex<RegistryState>,
    /// Events dropped because they came from a thread being torn down after
    /// its ring was handed over.
    pub(crate) teardown_dropped: AtomicU64,
    /// Events dropped because their thread had no ring and the budget had no
    /// room for one (the thread tries again at its next event).
    pub(crate) no_memory_dropped: AtomicU64,
    /// What every ring and its bookkeeping are taken from.
    pub(crate) budget: &'static Budget,
}

struct RegistryState {
    rings: Vec<Arc<ThreadRing>>,
    /// Rings listed since the flusher last took them (`take_added`).
    added: Vec<Arc<ThreadRing>>,
    /// Rings of earlier sessions a thread replaced: dropped (their memory
    /// freed) by the flusher, not by the recording thread.
    graveyard: Vec<Arc<ThreadRing>>,
}

/// The body of `Registry::new`, which is a `const fn` (so the process-wide
/// registry is a plain `static`, read on the hot path without the
/// initialisation check of a lazy one) except under loom, whose atomics
/// cannot be built in a constant.
macro_rules! new_registry {
    ($budget:expr) => {
        Registry {
            session: AtomicU64::new(0),
            ring_bytes: AtomicU64::new(DEFAULT_RING_BYTES as u64),
            overwrite: AtomicBool::new(false),
            thread_time: AtomicBool::new(false),
            next_seq: AtomicU32::new(FIRST_THREAD_SEQ),
            state: Mutex::new(RegistryState {
                rings: Vec::new(),
                added: Vec::new(),
                graveyard: Vec::new(),
            }),
            teardown_dropped: AtomicU64::new(0),
            no_memory_dropped: AtomicU64::new(0),
            budget: $budget,
        }
    };
}

impl Registry {
    /// The process-wide registry, drawing on the process-wide budget.
    #[cfg(not(ringtrace_loom))]
    const fn new() -> Self {
        new_registry!(&BUDGET)
    }

    /// A registry of its own (models, tests) with a budget of its own.
    #[cfg(ringtrace_loom)]
    pub(crate) fn new() -> Self {
        new_registry!(Budget::leaked(DEFAULT_BUDGET_BYTES))
    }

    /// A registry of its own with a budget of its own, for unit tests.
    #[cfg(all(test, not(ringtrace_loom)))]
    fn for_test() -> Self {
        new_registry!(Budget::leaked(DEFAULT_BUDGET_BYTES))
    }

    #[inline(always)]
    pub(crate) fn session(&self) -> u64 {
        self.session.load(Ordering::Relaxed)
    }

    /// Opens session `id` with `config`; rings of earlier sessions are dropped
    /// from the list (their threads replace them on their next event).
    pub(crate) fn open(&self, id: u64, config: RingConfig) {
        let mut st = self.state.lock();
        st.rings.clear();
        st.added.clear();
        self.ring_bytes
            .store(config.bytes as u64, Ordering::Relaxed);
        self.overwrite.store(config.overwrite, Ordering::Relaxed);
        self.thread_time
            .store(config.thread_time, Ordering::Relaxed);
        self.next_seq.store(FIRST_THREAD_SEQ, Ordering::Relaxed);
        self.budget.set_limit(config.budget_bytes);
        self.budget.reset_peak();
        self.budget.pool().open(words_for(config.bytes));
        // Release: pairs with `create`'s Acquire; the settings above are
        // the session's.
        self.session.store(id, Ordering::Release);
    }

    /// Ends the session: no new rings are handed out, the pool of segments
    /// is emptied; returns the listed ones.
    pub(crate) fn close(&self) -> Vec<Arc<ThreadRing>> {
        let mut st = self.state.lock();
        self.session.store(0, Ordering::Relaxed);
        // The pooled segments go back to the system and the budget; rings
        // freed from now on are not kept.
        self.budget.pool().close();
        st.added.clear();
        std::mem::take(&mut st.rings)
    }

    /// Creates and lists a ring for a thread of session `session` (cold
    /// path). `None` when that session is over, or when the budget has no
    /// room for the thread (counted in `no_memory_dropped` by the caller).
    pub(crate) fn create(
        &self,
        session: u64,
        pid: i32,
        tid: i64,
        name: String,
    ) -> Option<Arc<ThreadRing>> {
        // Acquire: pairs with `open`'s Release; the settings read below are
        // this session's (or a later one's, and then the check under the
        // lock below drops the ring).
        if session == 0 || self.session.load(Ordering::Acquire) != session {
            return None;
        }
        let bytes = self.ring_bytes.load(Ordering::Relaxed) as usize;
        let overwrite = self.overwrite.load(Ordering::Relaxed);
        // Everything is built, allocated and counted before the lock, which
        // every thread's first event takes (thousands at once when a crowd
        // of threads starts) and the flusher every few milliseconds: held
        // for two pushes, it is never held across an allocation of the
        // ring (a flight recorder's ring is big, see `Ring::new`).
        // Cold: the pool gives its segments back rather than starve a thread.
        if !self.budget.try_take_cold(THREAD_BYTES) {
            return None;
        }
        let Some(ring) = Ring::new(INITIAL_RING_BYTES, bytes, overwrite, self.budget) else {
            self.budget.give_back(THREAD_BYTES);
            return None;
        };
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        // From here, dropping `tr` gives back what was taken for it.
        let mut tr = ThreadRing::new(ring, session, seq, pid, tid, name, self.budget);
        tr.thread_time = self.thread_time.load(Ordering::Relaxed);
        tr.info.overwrite = overwrite;
        let tr = Arc::new(tr);
        let (listed, added) = (tr.clone(), tr.clone());
        let mut st = self.state.lock();
        if self.session.load(Ordering::Relaxed) != session {
            drop(st);
            return None; // the session ended meanwhile
        }
        st.rings.push(listed);
        st.added.push(added);
        Some(tr)
    }

    /// The flusher's view: the rings listed since its last call, moved to
    /// `added` (emptied first; its allocation is handed to the registry for
    /// the next ones, so the lock is held for two swaps, however many
    /// threads started). The flusher keeps its own list of the session's
    /// rings from these, and takes out the ones it `remove`s. It also frees,
    /// on the flusher's thread, the rings `bury` was given.
    pub(crate) fn take_added(&self, added: &mut Vec<Arc<ThreadRing>>) {
        added.clear();
        let buried = {
            let mut st = self.state.lock();
            std::mem::swap(&mut st.added, added);
            std::mem::take(&mut st.graveyard)
        };
        drop(buried);
    }

    /// Hands a ring of an earlier session, which a thread no longer uses, to
    /// the flusher to free: freeing a big ring (unmapping its segments) is
    /// not for the recording thread's first event of a new session.
    fn bury(&self, ring: Arc<ThreadRing>) {
        self.state.lock().graveyard.push(ring);
    }

    /// Unlists the rings the flusher has fully drained after their threads
    /// exited (`seq_ids`, sorted): one pass over the list for a whole flusher
    /// pass, however many threads ended in it.
    pub(crate) fn remove(&self, seq_ids: &[u32]) {
        if seq_ids.is_empty() {
            return;
        }
        debug_assert!(seq_ids.is_sorted());
        let mut st = self.state.lock();
        st.rings
            .retain(|r| seq_ids.binary_search(&r.seq_id).is_err());
    }
}

/// Sequence id 1 is the session's own (process track, clocks, stats).
pub(crate) const SESSION_SEQ: u32 = 1;
pub(crate) const FIRST_THREAD_SEQ: u32 = 2;

pub(crate) use thread_local_access::*;

/// The process-wide registry and the thread-locals of the hot path. (Under
/// loom this compiles but is not exercised: the models build their own
/// `Registry`.)
mod thread_local_access {
    use super::*;

    /// The process-wide budget every session's rings are taken from.
    #[cfg(not(ringtrace_loom))]
    pub(crate) static BUDGET: Budget = Budget::new(DEFAULT_BUDGET_BYTES);
    #[cfg(not(ringtrace_loom))]
    pub(crate) static REGISTRY: Registry = Registry::new();
    #[cfg(ringtrace_loom)]
    pub(crate) static REGISTRY: once_cell::sync::Lazy<Registry> =
        once_cell::sync::Lazy::new(Registry::new);

    thread_local! {
        /// Raw pointer to the ring this thread's `OWNER_KEY` value owns, or
        /// null. A const-initialised thread-local without destructor: the
        /// cheapest kind to read, and readable during the whole teardown of
        /// the thread, including other thread-locals' destructors.
        static CURRENT: Cell<*const ThreadRing> = const { Cell::new(std::ptr::null()) };
        /// Set when this thread's ring was handed over at its exit: events
        /// recorded after that (from other pthread-key destructors) are
        /// counted as lost.
        static EXITED: Cell<bool> = const { Cell::new(false) };
        /// Set when this thread's last attempt to get a ring found the budget
        /// used up (cleared when it gets one).
        static NO_MEMORY: Cell<bool> = const { Cell::new(false) };
    }

    /// Takes `bytes` of a thread's state kept outside its ring (the
    /// `tracing` bridge's site cache) from the process-wide budget; false if
    /// it has no room. Given back with `give_back_thread_state` when the
    /// state is freed.
    #[cfg(feature = "tracing")]
    pub(crate) fn take_thread_state(bytes: u64) -> bool {
        REGISTRY.budget.try_take(bytes)
    }

    /// Gives back what `take_thread_state` took.
    #[cfg(feature = "tracing")]
    pub(crate) fn give_back_thread_state(bytes: u64) {
        REGISTRY.budget.give_back(bytes)
    }

    /// Counts the end of a scope whose begin found no ring (for lack of
    /// memory, or after the thread's ring was handed over at its exit):
    /// lost too, so that lost + written adds up to what was recorded.
    #[cold]
    pub(crate) fn count_implied_drop_without_ring() {
        if NO_MEMORY.with(|n| n.get()) {
            REGISTRY.no_memory_dropped.fetch_add(1, Ordering::Relaxed);
        } else if EXITED.with(|e| e.get()) && REGISTRY.session() != 0 {
            REGISTRY.teardown_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A pthread key whose per-thread value is one `Arc` count of the
    /// thread's ring. Its destructor, `owner_exit`, hands the ring over to
    /// the flusher. It is a pthread key rather than a `thread_local!` so that
    /// it runs after every `thread_local!` destructor of the thread (glibc
    /// runs those first, then pthread-key destructors): events recorded from
    /// `Drop` of thread-locals, whichever order they were made in, still go
    /// to the thread's ring.
    static OWNER_KEY: once_cell::sync::OnceCell<libc::pthread_key_t> =
        once_cell::sync::OnceCell::new();

    fn owner_key() -> Option<libc::pthread_key_t> {
        OWNER_KEY
            .get_or_try_init(|| {
                let mut key: libc::pthread_key_t = 0;
                // SAFETY: `key` is a valid place for the new key; `owner_exit`
                // has the destructor signature pthread expects.
                let r = unsafe { libc::pthread_key_create(&mut key, Some(owner_exit)) };
                if r == 0 {
                    Ok(key)
                } else {
                    Err(())
                }
            })
            .ok()
            .copied()
    }

    /// Runs at the exit of a thread that recorded, after its `thread_local!`
    /// destructors, with the key's value (never null: pthread skips nulls).
    unsafe extern "C" fn owner_exit(value: *mut libc::c_void) {
        // Clear the cached pointer before the Arc can go away.
        CURRENT.with(|c| c.set(std::ptr::null()));
        EXITED.with(|e| e.set(true));
        // SAFETY: every non-null value of the key is an `Arc::into_raw` of a
        // ThreadRing made by `install` and owned by the key alone (`install`
        // takes the old value back before storing a new one); pthread hands
        // it to this destructor once and resets it to null.
        let tr = unsafe { Arc::from_raw(value as *const ThreadRing) };
        tr.retire();
    }

    /// Runs `f` with this thread's ring of the current session, creating it on
    /// first use. `None` when no session records, when the budget has no room
    /// for a new ring, or after the thread's ring was handed over at its exit.
    #[inline(always)]
    pub(crate) fn with_current<R>(f: impl FnOnce(&ThreadRing) -> R) -> Option<R> {
        let ptr = CURRENT.with(|c| c.get());
        if !ptr.is_null() {
            // SAFETY: `CURRENT` is non-null only between `install` storing the
            // pointer of the Arc it hands to `OWNER_KEY` and the release of
            // that Arc, which happens after `CURRENT` is cleared or replaced
            // (in `owner_exit`, or in `install` for a new session), all on
            // this thread. So the ThreadRing is alive for this whole call
            // (`f` only writes records; it cannot reach `install` or thread
            // exit), and it is only shared immutably (its mutable state is
            // atomic).
            let tr = unsafe { &*ptr };
            if tr.session == REGISTRY.session() {
                return Some(f(tr));
            }
        }
        install().map(|tr| f(&tr))
    }

    /// [`with_current`], with `f` at one call site: for a large `f` (the
    /// `tracing` bridge's enter, exit and event), which the compiler inlines
    /// into the caller. With `with_current`'s two call sites it makes such
    /// an `f` a function of its own: a call, a frame, and the closure's
    /// captures stored and loaded again on every record. (A small `f`, a
    /// macro's scope, is inlined at both sites, and is better off there:
    /// this way's cold path keeps an `Arc` alive across `f`.)
    #[cfg(feature = "tracing")]
    #[inline(always)]
    pub(crate) fn with_current_once<R>(f: impl FnOnce(&ThreadRing) -> R) -> Option<R> {
        let ptr = CURRENT.with(|c| c.get());
        let installed;
        // SAFETY: as in `with_current`: a non-null `CURRENT` points to the
        // thread's ring, alive for this whole call (its `Arc` is released
        // only after `CURRENT` is cleared or replaced, on this thread, which
        // `f` cannot reach) and only shared immutably.
        let tr = match unsafe { ptr.as_ref() } {
            Some(tr) if tr.session == REGISTRY.session() => tr,
            _ => {
                installed = install()?;
                &*installed
            }
        };
        Some(f(tr))
    }

    /// Cold path: gives this thread a ring for the current session.
    #[cold]
    #[inline(never)]
    fn install() -> Option<Arc<ThreadRing>> {
        let session = REGISTRY.session();
        if session == 0 {
            return None;
        }
        let key = match owner_key() {
            Some(key) if !EXITED.with(|e| e.get()) => key,
            _ => {
                REGISTRY.teardown_dropped.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let no_ring = || {
            let no_memory = REGISTRY.session() == session;
            if no_memory {
                REGISTRY.no_memory_dropped.fetch_add(1, Ordering::Relaxed);
            }
            NO_MEMORY.with(|n| n.set(no_memory));
            None
        };
        // While the budget is used up, each event of a thread without a ring
        // comes here: it reads the budget, and takes no lock, no allocation.
        let first = THREAD_BYTES + segment_bytes(INITIAL_RING_BYTES / 8);
        if !REGISTRY.budget.has_room(first) {
            return no_ring();
        }
        let name = std::thread::current()
            .name()
            .map(str::to_owned)
            .unwrap_or_default();
        let Some(tr) = REGISTRY.create(session, crate::sys::pid(), crate::sys::tid(), name) else {
            return no_ring();
        };
        NO_MEMORY.with(|n| n.set(false));
        // SAFETY: `key` is a live key (never deleted); reading this thread's
        // value has no other precondition.
        let old = unsafe { libc::pthread_getspecific(key) };
        let raw = Arc::into_raw(tr.clone());
        // SAFETY: as above; the value is an `Arc::into_raw` the key owns from
        // now on (see `owner_exit`).
        if unsafe { libc::pthread_setspecific(key, raw as *const libc::c_void) } != 0 {
            // SAFETY: `raw` was not stored: take its count back. This one
            // event is recorded, then the ring goes to the flusher.
            drop(unsafe { Arc::from_raw(raw) });
            tr.retire();
            return Some(tr);
        }
        CURRENT.with(|c| c.set(raw));
        if !old.is_null() {
            // SAFETY: the key's previous value, an `Arc::into_raw` it owned
            // (the ring of an earlier session), replaced above; `CURRENT` no
            // longer points to it.
            let old = unsafe { Arc::from_raw(old as *const ThreadRing) };
            old.retire();
            REGISTRY.bury(old);
        }
        Some(tr)
    }
}

#[cfg(all(test, not(ringtrace_loom)))]
mod tests;
