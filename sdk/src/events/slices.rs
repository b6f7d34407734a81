//! Slices that end later: on the thread ([`SliceGuard`]) or on a custom
//! [`Track`] ([`TrackSliceGuard`]).

use super::{field, op, write, write_on, Fields, Stack};
use crate::record::args::TraceValue;
use crate::record::clock::ticks;
use crate::record::layout::{self, MAX_DEPTH};
use crate::record::registry::with_current;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

/// Ends a slice on a custom [`Track`] when dropped. `Send`: it may end on
/// another thread than it began.
#[must_use = "the slice ends when the guard is dropped; bind it with `let _guard = ...`"]
pub struct TrackSliceGuard {
    pub(super) site: u32,
    pub(super) track: Option<&'static Track>,
    /// The begin's encoded NAME field (JSON ends repeat it); None when not
    /// recording.
    pub(super) name: Option<Fields>,
}

impl fmt::Debug for TrackSliceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackSliceGuard")
            .field("recording", &self.name.is_some())
            .finish()
    }
}

impl TrackSliceGuard {
    /// Ends the slice now.
    pub fn end(self) {}
}

impl Drop for TrackSliceGuard {
    fn drop(&mut self) {
        if let (Some(mut f), Some(track)) = (self.name.take(), self.track) {
            f.track(track);
            write(self.site, op::TRACK_END, &mut f, false);
            f.give();
        }
    }
}

/// Deepest nesting of custom tracks.
pub const MAX_TRACK_DEPTH: usize = 8;

/// A named track of its own, beside the threads' tracks: a child of the
/// process's track, or of another `Track` (up to [`MAX_TRACK_DEPTH`]
/// levels), for work that is not a thread's call stack (a GPU queue, a
/// connection, a state machine). Slices on one track must nest.
///
/// In Perfetto it is a TrackDescriptor (uuid derived from the process and
/// the track's path, unique in the trace; `parent_uuid` its parent's or the
/// process's; `sibling_merge_behavior: NONE`, so two tracks with the same
/// name stay two tracks). In JSON its slices and instants are async events
/// (`b`/`e`/`n`) with `id2.local` derived from its path; JSON readers name
/// such a track after its first event.
///
/// # Examples
///
/// ```
/// use ringtrace::events::{Category, Track};
/// static GPU: Category = Category::new("gpu");
/// static QUEUES: Track = Track::new("GPU queues");
/// static COMPUTE: Track = Track::child(&QUEUES, "compute");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let job = GPU.track_scope(&COMPUTE, "dispatch").arg("groups", 64).begin();
/// std::thread::spawn(move || drop(job)).join().unwrap(); // ends on another thread
/// GPU.track_instant(&QUEUES, "fence").emit();
/// ```
#[derive(Debug)]
pub struct Track {
    name: &'static str,
    parent: Option<&'static Track>,
}

impl Track {
    /// A track under the process's track.
    pub const fn new(name: &'static str) -> Track {
        Track { name, parent: None }
    }

    /// A track nested under `parent`.
    pub const fn child(parent: &'static Track, name: &'static str) -> Track {
        Track {
            name,
            parent: Some(parent),
        }
    }

    /// The track's own name (not its parents').
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Fills `out` with the names from the root to this track; returns
    /// how many (deeper levels than `MAX_TRACK_DEPTH` are cut at the root).
    pub(super) fn path(&'static self, out: &mut [&'static str; MAX_TRACK_DEPTH]) -> usize {
        let mut chain = [""; MAX_TRACK_DEPTH];
        let mut n = 0;
        let mut t = Some(self);
        while let (Some(tr), true) = (t, n < MAX_TRACK_DEPTH) {
            chain[n] = tr.name;
            n += 1;
            t = tr.parent;
        }
        for i in 0..n {
            out[i] = chain[n - 1 - i];
        }
        n
    }
}

const INACTIVE: u32 = u32::MAX;

/// Ends a slice begun with [`Event::begin`](crate::events::Event::begin) when dropped. `!Send`: a slice
/// begins and ends on one thread (use [`Category::async_begin`](crate::events::Category::async_begin) for work
/// that moves).
///
/// # Examples
///
/// ```
/// use ringtrace::events::{Category, Stack};
/// static DB: Category = Category::new("db");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let mut slice = DB.scope("query").arg("table", "users").begin();
/// let rows = 12;
/// slice.end_arg("rows", rows); // known only at the end
/// slice.end_stack(Stack::Raw(&["main", "run_query"]));
/// slice.end();
/// ```
#[must_use = "the slice ends when the guard is dropped; bind it with `let _guard = ...`"]
pub struct SliceGuard {
    pub(super) depth: u32,
    /// Args and stack for the end, if any were given.
    pub(super) end: Option<Fields>,
    pub(super) _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for SliceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SliceGuard")
            .field("recording", &self.is_recording())
            .finish()
    }
}

impl SliceGuard {
    pub(super) fn inactive() -> SliceGuard {
        SliceGuard {
            depth: INACTIVE,
            end: None,
            _not_send: PhantomData,
        }
    }

    /// Whether the begin was recorded.
    pub fn is_recording(&self) -> bool {
        self.depth != INACTIVE
    }

    /// An argument known only at the end, merged into the slice's args (a
    /// key given at both ends takes the end's value).
    pub fn end_arg(&mut self, key: &str, value: impl TraceValue) {
        if self.is_recording() {
            self.end.get_or_insert_with(Fields::take).arg(key, &value);
        }
    }

    /// The stack at the end of the slice (`esf` / `estack`).
    pub fn end_stack(&mut self, stack: Stack<'_>) {
        if self.is_recording() {
            self.end.get_or_insert_with(Fields::take).stack(true, stack);
        }
    }

    /// Ends the slice now.
    pub fn end(self) {}
}

impl Drop for SliceGuard {
    fn drop(&mut self) {
        if self.depth == INACTIVE {
            return;
        }
        let depth = self.depth;
        let extra = self.end.take();
        with_current(|tr| {
            match extra {
                Some(mut f) => {
                    let mut head = Fields::take();
                    head.uint(field::DEPTH, depth.min(MAX_DEPTH) as u64);
                    f.seal();
                    head.words.extend_from_slice(&f.words);
                    write_on(tr, 0, op::SCOPE_END, &mut head, true);
                    head.give();
                    f.give();
                }
                None => {
                    if tr.thread_time {
                        let tts = crate::sys::thread_cpu_ns();
                        let payload = depth.min(MAX_DEPTH) as u64;
                        let ts = ticks();
                        layout::write(&tr.ring, layout::KIND_END_TT, payload, ts, &[tts], &());
                    } else {
                        let ts = ticks();
                        let payload = depth.min(MAX_DEPTH) as u64;
                        layout::write(&tr.ring, layout::KIND_END, payload, ts, &[], &());
                    }
                }
            }
            tr.depth.store(depth, Ordering::Relaxed);
        });
    }
}
