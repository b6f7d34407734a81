//! The thread registry: which ring each recording thread writes into, and the
//! hand-over of a ring when its thread exits.
//!
//! A thread gets its ring on its first event of a session (the only time it
//! takes a lock or allocates). The ring is shared, by `Arc`, between:
//! * the thread, through `OWNER` (a thread-local whose destructor marks the
//!   ring retired), with a raw pointer cached in `CURRENT` for the hot path;
//! * the registry list, which the flusher snapshots. A retired ring stays
//!   listed until the flusher has drained it, so nothing a thread recorded is
//!   lost when it exits.
//!
//! Each session has an id; a ring belongs to one session. A thread whose
//! cached ring is from an earlier session gets a fresh one on its next event.

use crate::record::ring::Ring;
use crate::record::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};
use std::cell::{Cell, RefCell};

/// One thread's ring and identity.
pub(crate) struct ThreadRing {
    pub(crate) ring: Ring,
    /// Session this ring belongs to.
    pub(crate) session: u64,
    /// Packet sequence id of this thread in the trace (unique in the session).
    pub(crate) seq_id: u32,
    pub(crate) pid: i32,
    pub(crate) tid: i64,
    pub(crate) name: String,
    /// Set (Release) by the owning thread's exit; once seen (Acquire), every
    /// record the thread wrote is published.
    pub(crate) retired: AtomicBool,
    /// Open recorded scopes on this thread. Written only by the owner.
    pub(crate) depth: AtomicU32,
    /// Scope begins and ends also record the thread's CPU time (set once,
    /// before the ring is shared).
    pub(crate) thread_time: bool,
}

impl ThreadRing {
    pub(crate) fn new(
        ring: Ring,
        session: u64,
        seq_id: u32,
        pid: i32,
        tid: i64,
        name: String,
    ) -> Self {
        ThreadRing {
            ring,
            session,
            seq_id,
            pid,
            tid,
            name,
            retired: AtomicBool::new(false),
            depth: AtomicU32::new(0),
            thread_time: false,
        }
    }

    pub(crate) fn retire(&self) {
        // Release: pairs with the flusher's Acquire in `is_retired`; every
        // record this thread published happens-before the flag is seen.
        self.retired.store(true, Ordering::Release);
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Flight-recorder mode: the oldest records are overwritten when full.
    pub(crate) fn is_overwrite(&self) -> bool {
        self.ring.is_overwrite()
    }
}

/// Settings for rings created during the current session.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingConfig {
    pub(crate) bytes: usize,
    pub(crate) overwrite: bool,
    /// Record thread CPU time on scope begins and ends.
    pub(crate) thread_time: bool,
}

pub(crate) struct Registry {
    /// Id of the recording session; 0 when none.
    session: AtomicU64,
    state: Mutex<RegistryState>,
    /// Events dropped because they came from a thread being torn down after
    /// its ring was handed over.
    pub(crate) teardown_dropped: AtomicU64,
}

struct RegistryState {
    rings: Vec<Arc<ThreadRing>>,
    config: RingConfig,
    next_seq: u32,
}

/// The body of `Registry::new`, which is a `const fn` (so the process-wide
/// registry is a plain `static`, read on the hot path without the
/// initialisation check of a lazy one) except under loom, whose atomics
/// cannot be built in a constant.
macro_rules! new_registry {
    () => {
        Registry {
            session: AtomicU64::new(0),
            state: Mutex::new(RegistryState {
                rings: Vec::new(),
                config: RingConfig {
                    bytes: 1 << 20,
                    overwrite: false,
                    thread_time: false,
                },
                next_seq: FIRST_THREAD_SEQ,
            }),
            teardown_dropped: AtomicU64::new(0),
        }
    };
}

impl Registry {
    #[cfg(not(ringtrace_loom))]
    pub(crate) const fn new() -> Self {
        new_registry!()
    }

    #[cfg(ringtrace_loom)]
    pub(crate) fn new() -> Self {
        new_registry!()
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
        st.config = config;
        st.next_seq = FIRST_THREAD_SEQ;
        self.session.store(id, Ordering::Relaxed);
    }

    /// Ends the session: no new rings are handed out; returns the listed ones.
    pub(crate) fn close(&self) -> Vec<Arc<ThreadRing>> {
        let mut st = self.state.lock();
        self.session.store(0, Ordering::Relaxed);
        std::mem::take(&mut st.rings)
    }

    /// Creates and lists a ring for a thread of session `session` (cold path).
    pub(crate) fn create(
        &self,
        session: u64,
        pid: i32,
        tid: i64,
        name: String,
    ) -> Option<Arc<ThreadRing>> {
        let config = {
            let st = self.state.lock();
            if self.session.load(Ordering::Relaxed) != session || session == 0 {
                return None;
            }
            st.config
        };
        // Built outside the lock: a big ring takes a while to allocate and
        // map in (see `Ring::new`), and the flusher takes this lock every
        // few milliseconds.
        let ring = Ring::new(config.bytes, config.overwrite);
        let mut st = self.state.lock();
        if self.session.load(Ordering::Relaxed) != session {
            return None; // the session ended meanwhile
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let mut tr = ThreadRing::new(ring, session, seq, pid, tid, name);
        tr.thread_time = st.config.thread_time;
        let ring = Arc::new(tr);
        st.rings.push(ring.clone());
        Some(ring)
    }

    /// The flusher's view: every listed ring.
    pub(crate) fn snapshot(&self, out: &mut Vec<Arc<ThreadRing>>) {
        out.clear();
        out.extend(self.state.lock().rings.iter().cloned());
    }

    /// Unlists a ring the flusher has fully drained after its thread exited.
    pub(crate) fn remove(&self, seq_id: u32) {
        self.state.lock().rings.retain(|r| r.seq_id != seq_id);
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

    #[cfg(not(ringtrace_loom))]
    pub(crate) static REGISTRY: Registry = Registry::new();
    #[cfg(ringtrace_loom)]
    pub(crate) static REGISTRY: once_cell::sync::Lazy<Registry> =
        once_cell::sync::Lazy::new(Registry::new);

    /// Owns this thread's ring; dropping it (thread exit, or a new session)
    /// hands the ring over to the flusher.
    struct Owner(Arc<ThreadRing>);

    impl Drop for Owner {
        fn drop(&mut self) {
            // Clear the cached pointer before the Arc can go away.
            CURRENT.with(|c| c.set(std::ptr::null()));
            self.0.retire();
        }
    }

    thread_local! {
        /// Raw pointer to the ring `OWNER` holds, or null. A const-initialised
        /// thread-local without destructor: the cheapest kind to read, and
        /// readable during thread teardown.
        static CURRENT: Cell<*const ThreadRing> = const { Cell::new(std::ptr::null()) };
        static OWNER: RefCell<Option<Owner>> = const { RefCell::new(None) };
    }

    /// Runs `f` with this thread's ring of the current session, creating it on
    /// first use. `None` when no session records, or during thread teardown.
    #[inline(always)]
    pub(crate) fn with_current<R>(f: impl FnOnce(&ThreadRing) -> R) -> Option<R> {
        let ptr = CURRENT.with(|c| c.get());
        if !ptr.is_null() {
            // SAFETY: `CURRENT` is non-null only between `install` storing the
            // pointer of the Arc it moves into `OWNER` and `Owner::drop`
            // nulling it before releasing that Arc, all on this thread. So the
            // ThreadRing is alive for this whole call (nothing here can drop
            // `OWNER`: `f` only writes records), and it is only shared
            // immutably (all its mutable state is atomic).
            let tr = unsafe { &*ptr };
            if tr.session == REGISTRY.session() {
                return Some(f(tr));
            }
        }
        install().map(|tr| f(&tr))
    }

    /// Cold path: gives this thread a ring for the current session.
    #[cold]
    #[inline(never)]
    fn install() -> Option<Arc<ThreadRing>> {
        let session = REGISTRY.session();
        if session == 0 {
            return None;
        }
        let alive = OWNER.try_with(|_| ()).is_ok();
        if !alive {
            REGISTRY.teardown_dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let name = std::thread::current()
            .name()
            .map(str::to_owned)
            .unwrap_or_default();
        let tr = REGISTRY.create(session, crate::sys::pid(), crate::sys::tid(), name)?;
        let installed = OWNER.try_with(|o| {
            let old = o.borrow_mut().replace(Owner(tr.clone()));
            CURRENT.with(|c| c.set(Arc::as_ptr(&tr)));
            drop(old); // retires the previous session's ring (its drop clears CURRENT first, so re-set below)
            CURRENT.with(|c| c.set(Arc::as_ptr(&tr)));
        });
        match installed {
            Ok(()) => Some(tr),
            Err(_) => {
                tr.retire();
                Some(tr)
            }
        }
    }
}
