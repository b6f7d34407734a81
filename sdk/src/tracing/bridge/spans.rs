//! The state of one recorded span (`SpanData`) and the records its enter,
//! exit and close write; the thread's stack of entered spans.

use super::fields::{Fields, Words};
use super::sites::SiteInfo;
use crate::record::callsite::Callsite;
use crate::record::layout::{
    self, KIND_ASYNC_BEGIN, KIND_BEGIN, KIND_END, KIND_END_ARGS, KIND_FLOW, MAX_DEPTH,
};
use crate::record::registry::ThreadRing;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Async range ids of the layer: bit 62 set, so they never meet the ids of
/// `#[traced] async fn` ranges.
const ASYNC_ID_BASE: u64 = 1 << 62;
/// Relaxed: only uniqueness matters.
static NEXT_ASYNC_ID: AtomicU64 = AtomicU64::new(1);
pub(super) static NEXT_FLOW_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD_KEY: AtomicU64 = AtomicU64::new(1);
/// Number of spans whose next slice end has something to carry (fields
/// recorded, flows). While it is 0, an exit writes a bare END without
/// looking the span up. Relaxed: a value recorded on another thread without
/// synchronisation with the exit may as well be carried by the next end.
pub(super) static END_PENDING: AtomicU64 = AtomicU64::new(0);
/// `SpanSlices::Lifetime` in the running session: a span is one async
/// range, begun at its creation and ended at its close; its enters and
/// exits only keep the thread's stack of entered spans. Relaxed: set before
/// the session hands out its layer or subscriber.
static LIFETIME_SLICES: AtomicBool = AtomicBool::new(false);

/// Sets how the session's spans are drawn (`Builder::span_slices`).
pub(crate) fn set_lifetime_slices(on: bool) {
    LIFETIME_SLICES.store(on, Ordering::Relaxed);
}

/// Whether a span is one range from creation to close (`SpanSlices::Lifetime`).
#[inline(always)]
pub(crate) fn lifetime_slices() -> bool {
    LIFETIME_SLICES.load(Ordering::Relaxed)
}

/// Number of async spans not dropped yet. While it and `END_PENDING` are 0,
/// a close has nothing to write and does not look the span up.
pub(super) static ASYNC_LIVE: AtomicU64 = AtomicU64::new(0);

/// What ringtrace keeps of a span: in its slot of the span table (layer and
/// subscriber), where it stays until the span closes.
pub(crate) struct SpanData {
    pub(super) info: &'static SiteInfo,
    /// The call site for the fields present now.
    pub(super) site: &'static Callsite,
    /// Values of the present fields in field order: what each begin carries.
    /// Inline up to `INLINE_WORDS`: a span with a few primitive fields (two
    /// words each) is kept without an allocation.
    words: Inline<u64, INLINE_WORDS>,
    /// (field index, start, end) into `words`, in field order.
    ranges: Inline<(u32, u32, u32), INLINE_FIELDS>,
    mask: u64,
    /// Tick count at creation: where an async range begins.
    created: u64,
    /// The thread (`thread_key`) of the first enter; 0 before it.
    pub(super) thread: u64,
    /// Id of the async range, 0 while the span is not async.
    pub(super) async_id: u64,
    /// Fields recorded since the last begin: carried by the next end (or,
    /// recorded while the span is not entered, by its next begin).
    dirty: u64,
    /// Whether a slice of the span was written: the first carries all its
    /// fields, later ones only those recorded since (unless the session
    /// writes them on every slice: `Builder::span_fields_every_slice`).
    begun: bool,
    /// Fields recorded since the async range began: carried by its end.
    pub(super) dirty_async: u64,
    /// Flow ids (with `FLOW_IN`) waiting for this span's next slice end.
    pub(super) flows: Vec<u64>,
    /// Its OpenTelemetry ids while an OTLP exporter runs (`otel.rs`).
    #[cfg(feature = "otlp")]
    pub(crate) otel: super::otel::OtelIds,
    /// Its trace's W3C `tracestate` while it is open (`otel.rs`), if the
    /// trace came with one: shared by the trace's spans, not copied; `None`
    /// (nothing more to carry) for every other span.
    #[cfg(feature = "otlp")]
    pub(crate) tracestate: Option<crate::context::TraceState>,
}

impl SpanData {
    #[inline]
    pub(super) fn new(info: &'static SiteInfo, created: u64) -> SpanData {
        SpanData {
            info,
            site: info.full,
            words: Inline::new(),
            ranges: Inline::new(),
            mask: 0,
            created,
            thread: 0,
            async_id: 0,
            dirty: 0,
            begun: false,
            dirty_async: 0,
            flows: Vec::new(),
            #[cfg(feature = "otlp")]
            otel: Default::default(),
            #[cfg(feature = "otlp")]
            tracestate: None,
        }
    }

    /// The values a span was created with.
    pub(super) fn set_values(&mut self, fields: &Fields) {
        if fields.in_order() {
            self.words.clear();
            self.words.extend_from_slice(&fields.words);
            self.ranges.clear();
            self.ranges.extend_from_slice(&fields.ranges);
        } else {
            self.merge(fields);
        }
        self.mask = fields.mask();
        self.site = self.info.site(self.mask);
    }

    /// Takes the values in `fields` (recorded later), replacing old ones.
    fn merge(&mut self, fields: &Fields) {
        let mut words = Inline::new();
        let mut ranges = Inline::new();
        merge_values(
            self.words.as_slice(),
            self.ranges.as_slice(),
            fields,
            &mut words,
            &mut ranges,
        );
        self.words = words;
        self.ranges = ranges;
    }

    /// Whether a freed slot may keep this state to be [`reset`](Self::reset)
    /// for its next span: it owns no heap memory and dropping it would do
    /// nothing. Spans are hundreds of bytes with their inline buffers;
    /// moving one out of its slot and back in cost more than the rest of a
    /// span's life.
    pub(crate) fn reusable(&self) -> bool {
        !self.end_pending() && self.async_id == 0 && !self.owns_heap()
    }

    /// Whether a freed slot keeps this state for its next span: if it owns
    /// no heap memory, what it counts (`END_PENDING`, `ASYNC_LIVE`) is
    /// uncounted, as dropping it would, and it is made
    /// [`reusable`](Self::reusable) in place. A closed async span's state
    /// (whose close was written) is kept so too, not moved out and dropped.
    #[inline]
    pub(crate) fn settle(&mut self) -> bool {
        if self.owns_heap() {
            return false;
        }
        if self.end_pending() {
            END_PENDING.fetch_sub(1, Ordering::Relaxed);
            self.dirty = 0;
            #[cfg(feature = "otlp")]
            {
                self.otel.annotate = false;
            }
        }
        if self.async_id != 0 {
            ASYNC_LIVE.fetch_sub(1, Ordering::Relaxed);
            self.async_id = 0;
        }
        debug_assert!(self.reusable());
        true
    }

    /// Tick count at the span's creation.
    pub(crate) fn created(&self) -> u64 {
        self.created
    }

    /// Whether the state holds heap memory (values past the inline ones,
    /// flows' room, a share of a `tracestate`).
    #[inline]
    pub(super) fn owns_heap(&self) -> bool {
        #[cfg(feature = "otlp")]
        if self.tracestate.is_some() {
            return true;
        }
        self.flows.capacity() != 0 || self.words.spilled() || self.ranges.spilled()
    }

    /// Makes a [`reusable`](Self::reusable) state that of a new span, in
    /// place: as `new` without building (and moving) a whole one.
    #[inline]
    pub(super) fn reset(&mut self, info: &'static SiteInfo, created: u64) {
        debug_assert!(self.reusable());
        self.info = info;
        self.site = info.full;
        self.words.clear();
        self.ranges.clear();
        self.mask = 0;
        self.created = created;
        self.thread = 0;
        self.async_id = 0;
        self.dirty = 0;
        self.begun = false;
        self.dirty_async = 0;
        #[cfg(feature = "otlp")]
        {
            self.otel = Default::default();
        }
    }

    /// Whether closing the span writes anything: the end of its async range,
    /// or flows no slice end carried.
    pub(crate) fn must_close(&self) -> bool {
        #[cfg(feature = "otlp")]
        if self.otel.is_set() {
            return true; // its OTEL record
        }
        self.async_id != 0 || !self.flows.is_empty()
    }

    /// The values of the present fields, in field order (the args of
    /// `self.site`).
    #[cfg(feature = "otlp")]
    pub(super) fn values(&self) -> &[u64] {
        self.words.as_slice()
    }

    /// Whether no field was recorded since the last begin.
    #[inline]
    pub(super) fn dirty_is_clear(&self) -> bool {
        self.dirty == 0
    }

    fn end_pending(&self) -> bool {
        #[cfg(feature = "otlp")]
        if self.otel.annotate {
            return true; // its trace id, on its first slice's end
        }
        self.dirty != 0 || !self.flows.is_empty()
    }

    /// Runs `f`, keeping `END_PENDING` in step with this span's state.
    pub(super) fn tracking<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let was = self.end_pending();
        let r = f(self);
        match (was, self.end_pending()) {
            (false, true) => {
                END_PENDING.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                END_PENDING.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        r
    }

    pub(super) fn record(&mut self, fields: &Fields) {
        let m = fields.mask();
        self.merge(fields);
        self.mask |= m;
        if !lifetime_slices() {
            self.dirty |= m; // with lifetime slices, no slice end carries them
        }
        self.dirty_async |= m;
        self.site = self.info.site(self.mask);
    }

    /// The values of the fields in `mask`, in field order.
    pub(super) fn words_of<const N: usize>(&self, mask: u64, out: &mut Inline<u64, N>) {
        let words = self.words.as_slice();
        for &(i, s, e) in self.ranges.as_slice() {
            if mask >> i & 1 == 1 {
                out.extend_from_slice(&words[s as usize..e as usize]);
            }
        }
    }

    /// Makes the span async: its range begins at its creation.
    pub(super) fn begin_async(&mut self, tr: &ThreadRing) {
        if self.async_id != 0 {
            return;
        }
        self.async_id = ASYNC_ID_BASE | NEXT_ASYNC_ID.fetch_add(1, Ordering::Relaxed);
        ASYNC_LIVE.fetch_add(1, Ordering::Relaxed);
        self.dirty_async = 0;
        layout::write(
            &tr.ring,
            KIND_ASYNC_BEGIN,
            self.site.id() as u64,
            self.created,
            &[self.async_id],
            &Words(self.words.as_slice()),
        );
    }

    /// Writes the pending flows; the next end record binds them.
    pub(super) fn write_flows(&mut self, tr: &ThreadRing, ts: u64) {
        if !self.flows.is_empty() {
            layout::write(&tr.ring, KIND_FLOW, 0, ts, &self.flows, &());
            self.flows.clear();
        }
    }

    /// Ends this span's slice that began at `depth` on this thread.
    pub(super) fn end_slice(&mut self, tr: &ThreadRing, depth: u32, ts: u64) {
        self.write_flows(tr, ts);
        let depth = depth.min(MAX_DEPTH) as u64;
        #[cfg(feature = "otlp")]
        if self.dirty == 0 && self.otel.annotate {
            self.otel.annotate = false;
            return super::otel::end_with_trace_id(&self.otel, tr, depth, ts);
        }
        if self.dirty == 0 {
            layout::write(&tr.ring, KIND_END, depth, ts, &[], &());
        } else {
            let site = self.info.site(self.dirty);
            let mut args = Inline::<u64, INLINE_WORDS>::new();
            self.words_of(self.dirty, &mut args);
            self.dirty = 0;
            let payload = site.id() as u64 | depth << 24;
            layout::write(&tr.ring, KIND_END_ARGS, payload, ts, args.as_slice(), &());
        }
    }

    /// Begins a slice of this span at the thread's current depth; returns
    /// that depth if it was recorded. The span's first slice carries all
    /// its fields; a later one only those recorded since the last begin
    /// (none: its name alone), unless `every` (each slice carries them all).
    #[inline]
    pub(super) fn begin_slice(&mut self, tr: &ThreadRing, ts: u64, every: bool) -> Option<u32> {
        let depth = tr.depth.load(Ordering::Relaxed);
        let depth_bits = (depth.min(MAX_DEPTH) as u64) << 24;
        let wrote = if every || !self.begun {
            let payload = self.site.id() as u64 | depth_bits;
            let words = self.words.as_slice();
            layout::write(&tr.ring, KIND_BEGIN, payload, ts, words, &())
        } else if self.dirty == 0 {
            let payload = self.info.bare().id() as u64 | depth_bits;
            layout::write(&tr.ring, KIND_BEGIN, payload, ts, &[], &())
        } else {
            let site = self.info.site(self.dirty);
            let mut args = Inline::<u64, INLINE_WORDS>::new();
            self.words_of(self.dirty, &mut args);
            let payload = site.id() as u64 | depth_bits;
            layout::write(&tr.ring, KIND_BEGIN, payload, ts, args.as_slice(), &())
        };
        if wrote {
            tr.depth.store(depth.saturating_add(1), Ordering::Relaxed);
            self.dirty = 0;
            self.begun = true;
            Some(depth)
        } else {
            None
        }
    }
}

/// Values of `old_*` (field order) with those of `fields` (recorded later)
/// replacing or joining them, in field order.
pub(super) fn merge_values<const W: usize, const R: usize>(
    old_words: &[u64],
    old_ranges: &[(u32, u32, u32)],
    fields: &Fields,
    words: &mut Inline<u64, W>,
    ranges: &mut Inline<(u32, u32, u32), R>,
) {
    let new = fields.ordered_ranges();
    let (mut a, mut b) = (old_ranges.iter().peekable(), new.iter().peekable());
    loop {
        let (idx, src, s, e) = match (a.peek(), b.peek()) {
            (Some(&&(ia, sa, ea)), Some(&&(ib, sb, eb))) => {
                if ib <= ia {
                    b.next();
                    if ib == ia {
                        a.next();
                    }
                    (ib, &fields.words[..], sb, eb)
                } else {
                    a.next();
                    (ia, old_words, sa, ea)
                }
            }
            (Some(&&(ia, sa, ea)), None) => {
                a.next();
                (ia, old_words, sa, ea)
            }
            (None, Some(&&(ib, sb, eb))) => {
                b.next();
                (ib, &fields.words[..], sb, eb)
            }
            (None, None) => break,
        };
        let start = words.len() as u32;
        words.extend_from_slice(&src[s as usize..e as usize]);
        ranges.push((idx, start, words.len() as u32));
    }
}

/// Words of span values kept inline (8 fields of one payload word each).
const INLINE_WORDS: usize = 16;
/// Fields kept inline.
const INLINE_FIELDS: usize = 8;

/// A vector that keeps up to `N` elements in place and moves them to the
/// heap past that: the values of a span with a few primitive fields take no
/// allocation.
#[derive(Clone)]
pub(crate) struct Inline<T: Copy + Default, const N: usize> {
    len: usize,
    /// The elements while `len <= N`.
    buf: [T; N],
    /// The elements once `len > N`.
    heap: Vec<T>,
}

impl<T: Copy + Default, const N: usize> Inline<T, N> {
    #[inline]
    pub(crate) fn new() -> Self {
        Inline {
            len: 0,
            buf: [T::default(); N],
            heap: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        if self.len <= N {
            &self.buf[..self.len]
        } else {
            &self.heap
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the elements ever moved to the heap (its memory is kept).
    #[inline]
    pub(crate) fn spilled(&self) -> bool {
        self.heap.capacity() > 0
    }

    #[inline]
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.heap.clear();
    }

    #[inline]
    pub(crate) fn extend_from_slice(&mut self, s: &[T]) {
        let new = self.len + s.len();
        if new <= N {
            self.buf[self.len..new].copy_from_slice(s);
        } else {
            if self.len <= N {
                self.heap.clear();
                self.heap.extend_from_slice(&self.buf[..self.len]);
            }
            self.heap.extend_from_slice(s);
        }
        self.len = new;
    }

    #[inline]
    pub(crate) fn push(&mut self, v: T) {
        self.extend_from_slice(&[v]);
    }
}

impl Drop for SpanData {
    fn drop(&mut self) {
        if self.end_pending() {
            END_PENDING.fetch_sub(1, Ordering::Relaxed);
        }
        if self.async_id != 0 {
            ASYNC_LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A span entered on this thread and not exited yet.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Entered {
    pub(super) id: u64,
    /// Session of the ring it was recorded into.
    pub(super) session: u64,
    /// Depth its begin record carries; `None` if no begin was written.
    /// (One field, not a depth and a flag: no padding byte and no niche for
    /// the compiler to copy apart at each move.)
    pub(super) depth: Option<u32>,
}

/// Entries kept in the thread-local without destructor; deeper ones spill.
/// 16 (384 bytes): every thread of the process carries them, and about as
/// much as the vector's first allocation and destructor registration it
/// replaces.
const STACK_INLINE: usize = 16;

const NO_ENTRY: Entered = Entered {
    id: 0,
    session: 0,
    depth: None,
};

/// The thread's stack of entered spans: the outermost `STACK_INLINE` in a
/// fixed array of cells, the rest in `SPILL`. Cells, not a `RefCell`: a
/// push or pop is a plain indexed load and store, with no borrow flag to
/// check and set, and no callback can find the stack borrowed.
pub(super) struct Stack {
    len: Cell<usize>,
    inline: [Cell<Entered>; STACK_INLINE],
}

thread_local! {
    /// Spans entered on this thread, innermost last. Const and without
    /// destructor (cells of `Copy` values): reaching it is one thread-local
    /// address, no lazy registration, and it stays usable during the whole
    /// teardown of the thread, so a span entered and exited in `Drop` of
    /// any `thread_local!` (whichever was made first) is paired like any
    /// other.
    static STACK: Stack = const {
        Stack { len: Cell::new(0), inline: [const { Cell::new(NO_ENTRY) }; STACK_INLINE] }
    };
    /// Entries past `STACK_INLINE` deep (index 0 is entry `STACK_INLINE`).
    /// Gone once its destructor ran: then deeper spans are not recorded.
    static SPILL: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
    /// This thread's key for "entered on another thread" (0: not assigned).
    static THREAD_KEY: Cell<u64> = const { Cell::new(0) };
}

impl Stack {
    #[inline]
    fn get(&self, i: usize) -> Option<Entered> {
        if i < STACK_INLINE {
            Some(self.inline[i].get())
        } else {
            spilled(i - STACK_INLINE)
        }
    }

    /// Pushes `e`; false if there was no room (past `STACK_INLINE` deep
    /// once `SPILL` is gone).
    #[inline]
    fn push(&self, e: Entered) -> bool {
        let len = self.len.get();
        if len < STACK_INLINE {
            self.inline[len].set(e);
        } else if !spill(len - STACK_INLINE, e) {
            return false;
        }
        self.len.set(len + 1);
        true
    }

    /// Whether one more entry can be pushed.
    #[inline]
    fn has_room(&self) -> bool {
        self.len.get() < STACK_INLINE || spill_alive()
    }

    fn truncate(&self, len: usize) {
        if self.len.get() > STACK_INLINE {
            let _ = SPILL.try_with(|v| v.borrow_mut().truncate(len.saturating_sub(STACK_INLINE)));
        }
        self.len.set(self.len.get().min(len));
    }
}

#[cold]
fn spilled(i: usize) -> Option<Entered> {
    SPILL
        .try_with(|v| v.borrow().get(i).copied())
        .ok()
        .flatten()
}

/// Stores `e` at index `i` of `SPILL` (its length, but after a truncation
/// that found `SPILL` gone); false once `SPILL` is gone.
#[cold]
fn spill(i: usize, e: Entered) -> bool {
    SPILL
        .try_with(|v| {
            let mut v = v.borrow_mut();
            v.truncate(i);
            v.push(e);
        })
        .is_ok()
}

#[cold]
fn spill_alive() -> bool {
    SPILL.try_with(|_| ()).is_ok()
}

pub(super) fn thread_key() -> u64 {
    THREAD_KEY
        .try_with(|k| {
            if k.get() == 0 {
                k.set(NEXT_THREAD_KEY.fetch_add(1, Ordering::Relaxed));
            }
            k.get()
        })
        .unwrap_or(u64::MAX)
}

/// Whether the thread's stack can take one more entered span (false only
/// past `STACK_INLINE` deep during the thread's teardown): a load and a
/// compare (the stack is a const thread-local without destructor: its
/// address is a fixed offset from the thread pointer, with no state to check).
#[inline(always)]
pub(super) fn stack_has_room() -> bool {
    STACK.with(Stack::has_room)
}

/// Pushes `e` on the thread's stack: an indexed store and the length's;
/// false if it had no room.
#[inline(always)]
pub(super) fn push_entered(e: Entered) -> bool {
    STACK.with(|s| s.push(e))
}

/// Takes span `id`'s entry off the thread's stack if it is the innermost
/// and in the inline part: the common exit.
#[inline(always)]
pub(super) fn pop_innermost(id: u64) -> Option<Entered> {
    STACK.with(|s| {
        let top = s.len.get().wrapping_sub(1);
        if top < STACK_INLINE {
            let e = s.inline[top].get();
            if e.id == id {
                s.len.set(top);
                return Some(e);
            }
        }
        None
    })
}

/// Takes span `id`'s innermost entry off the thread's stack, with the
/// entries above it (entered after it, still entered), outermost first.
#[cold]
pub(super) fn take_entered(id: u64) -> Option<(Entered, Vec<Entered>)> {
    STACK.with(|s| take_below(s, id))
}

/// [`take_entered`] when the entry is not the innermost or is spilled.
#[cold]
fn take_below(s: &Stack, id: u64) -> Option<(Entered, Vec<Entered>)> {
    let len = s.len.get();
    let pos = (0..len)
        .rev()
        .find(|&i| s.get(i).is_some_and(|e| e.id == id))?;
    let entry = s.get(pos)?;
    let above: Vec<Entered> = (pos + 1..len).filter_map(|i| s.get(i)).collect();
    s.truncate(pos);
    Some((entry, above))
}

/// Puts back entries taken by [`take_entered`] (those still entered).
pub(super) fn extend_entered(entries: Vec<Entered>) {
    STACK.with(|s| {
        for e in entries {
            s.push(e);
        }
    })
}

/// The innermost span entered on this thread, if any, as its id and the
/// session (recorded) or owner (not recorded) its entry carries.
#[inline]
pub(crate) fn innermost_entered() -> Option<(u64, u64)> {
    STACK.with(|s| {
        let e = match s.len.get().checked_sub(1) {
            Some(i) if i < STACK_INLINE => s.inline[i].get(),
            Some(i) => spilled(i - STACK_INLINE)?,
            None => return None,
        };
        Some((e.id, e.session))
    })
}

/// The id of the innermost span entered on this thread, if any.
#[inline]
pub(crate) fn current_entered() -> Option<u64> {
    STACK.with(|s| match s.len.get().checked_sub(1) {
        Some(i) if i < STACK_INLINE => Some(s.inline[i].get().id),
        Some(i) => spilled(i - STACK_INLINE).map(|e| e.id),
        None => None,
    })
}

#[cfg(test)]
mod tests;
