//! What `tracing` spans and events become in ringtrace, shared by the
//! [`layer`](crate::layer()) (span state in the registry's extensions) and the
//! registry-free [`subscriber`](crate::subscriber()) (span state in its own
//! slab): call sites, field values, span state, and the records each
//! callback writes. See `layer.rs` for what is recorded.

#![forbid(unsafe_code)]

use crate::record::args::{ArgList, TraceValue, WordSink};
use crate::record::callsite::{Callsite, CallsiteKind};
use crate::record::clock::ticks;
use crate::record::layout::{
    self, FLOW_IN, KIND_ASYNC_BEGIN, KIND_ASYNC_END, KIND_BEGIN, KIND_END, KIND_END_ARGS,
    KIND_FLOW, KIND_INSTANT, MAX_DEPTH,
};
use crate::record::registry::{with_current, ThreadRing};
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Metadata};

/// Where the span state lives: the registry's extensions or the subscriber's slab.
pub(crate) trait SpanStore {
    /// Runs `f` on the state of span `id`, if it has any.
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R>;
}

// ---------------------------------------------------------------------------
// Call sites

/// What ringtrace knows of one `tracing` callsite.
struct SiteInfo {
    meta: &'static Metadata<'static>,
    /// Field names, in the callsite's field order.
    names: Vec<&'static str>,
    /// Events get a trailing `level` arg.
    event: bool,
    /// Mask of every field (bit `i` = field `i`).
    all: u64,
    /// The ringtrace call site when every field has a value.
    full: &'static Callsite,
    /// Call sites for other sets of present fields, made on first use.
    subsets: Mutex<Vec<(u64, &'static Callsite)>>,
}

impl SiteInfo {
    fn new(meta: &'static Metadata<'static>) -> SiteInfo {
        let names: Vec<&'static str> = meta.fields().iter().map(|f| f.name()).take(64).collect();
        let all = if names.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << names.len()) - 1
        };
        let event = meta.is_event();
        let full = make_site(meta, &names, all, event);
        SiteInfo {
            meta,
            names,
            event,
            all,
            full,
            subsets: Mutex::new(Vec::new()),
        }
    }

    /// The ringtrace call site whose arg names are the fields in `mask`.
    fn site(&self, mask: u64) -> &'static Callsite {
        if mask == self.all {
            return self.full;
        }
        let mut subsets = self.subsets.lock();
        if let Some(&(_, cs)) = subsets.iter().find(|(m, _)| *m == mask) {
            return cs;
        }
        let cs = make_site(self.meta, &self.names, mask, self.event);
        subsets.push((mask, cs));
        cs
    }
}

/// Leaks a ringtrace call site for `meta` with the fields of `mask` as arg
/// names, and registers it (so its id is valid in records from now on).
fn make_site(
    meta: &'static Metadata<'static>,
    names: &[&'static str],
    mask: u64,
    event: bool,
) -> &'static Callsite {
    let mut args: Vec<&'static str> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| mask >> i & 1 == 1)
        .map(|(_, n)| *n)
        .collect();
    if event {
        args.push("level");
    }
    let cs: &'static Callsite = Box::leak(Box::new(Callsite::new(
        meta.target(),
        meta.name(),
        meta.file().unwrap_or(""),
        meta.line().unwrap_or(0),
        meta.module_path().unwrap_or(""),
        Box::leak(args.into_boxed_slice()),
        if event {
            CallsiteKind::Instant
        } else {
            CallsiteKind::Scope
        },
    )));
    let _ = cs.is_enabled(); // registers the site: gives it its id
    cs
}

/// Hashes a metadata address (already unique and well spread above bit 3).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
}

type SiteMap = HashMap<usize, &'static SiteInfo, BuildHasherDefault<AddrHasher>>;

static SITES: Lazy<RwLock<SiteMap>> = Lazy::new(|| RwLock::new(SiteMap::default()));

/// Entries of a thread's site cache (a power of two).
const SITE_CACHE_LEN: usize = 256;

type CacheEntry = Cell<(usize, Option<&'static SiteInfo>)>;

thread_local! {
    /// This thread's view of `SITES`, direct-mapped by metadata address, so
    /// spans and events find their site without a shared lock or a hash map
    /// (a collision only sends the lookup to `SITES`).
    static SITE_CACHE: [CacheEntry; SITE_CACHE_LEN] =
        const { [const { Cell::new((0, None)) }; SITE_CACHE_LEN] };
}

fn cache_slot(key: usize) -> usize {
    (key >> 4 ^ key >> 12) & (SITE_CACHE_LEN - 1)
}

fn cached_site(key: usize) -> Option<&'static SiteInfo> {
    SITE_CACHE
        .try_with(|c| match c[cache_slot(key)].get() {
            (k, info) if k == key => info,
            _ => None,
        })
        .ok()
        .flatten()
}

#[inline]
fn site_info(meta: &'static Metadata<'static>) -> &'static SiteInfo {
    let key = meta as *const Metadata<'static> as usize;
    if let Some(info) = cached_site(key) {
        return info;
    }
    let info = site_info_slow(key, meta);
    let _ = SITE_CACHE.try_with(|c| c[cache_slot(key)].set((key, Some(info))));
    info
}

#[cold]
#[inline(never)]
fn site_info_slow(key: usize, meta: &'static Metadata<'static>) -> &'static SiteInfo {
    if let Some(&info) = SITES.read().get(&key) {
        return info;
    }
    let mut sites = SITES.write();
    let info = sites
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(SiteInfo::new(meta))));
    info
}

// ---------------------------------------------------------------------------
// Field values

/// Field values encoded as arg words (see `args`), with the field each
/// belongs to. A reusable scratch.
#[derive(Default)]
struct Fields {
    words: Vec<u64>,
    /// (field index, start, end) into `words`, in visit order.
    ranges: Vec<(u32, u32, u32)>,
    /// Formatting buffer for `Debug` values and messages.
    text: String,
    /// Words in field order, when visit order was not field order.
    sorted: Vec<u64>,
}

impl Fields {
    fn clear(&mut self) {
        self.words.clear();
        self.ranges.clear();
        self.sorted.clear();
    }

    fn mask(&self) -> u64 {
        self.ranges.iter().fold(0, |m, &(i, _, _)| m | 1 << i)
    }

    fn in_order(&self) -> bool {
        self.ranges.windows(2).all(|w| w[0].0 < w[1].0)
    }

    /// The ranges in field order, the last value of a field winning.
    fn ordered_ranges(&self) -> Vec<(u32, u32, u32)> {
        let mut r = self.ranges.clone();
        r.reverse();
        r.sort_by_key(|&(i, _, _)| i); // stable: the last visit of a field comes first
        r.dedup_by_key(|&mut (i, _, _)| i);
        r
    }

    /// The words of all values in field order.
    fn ordered(&mut self) -> &mut Vec<u64> {
        if self.in_order() {
            return &mut self.words;
        }
        let mut sorted = std::mem::take(&mut self.sorted);
        sorted.clear();
        for (_, s, e) in self.ordered_ranges() {
            sorted.extend_from_slice(&self.words[s as usize..e as usize]);
        }
        self.sorted = sorted;
        &mut self.sorted
    }
}

/// Encodes visited field values into a [`Fields`].
struct Visitor<'a>(&'a mut Fields);

impl Visitor<'_> {
    fn put(&mut self, field: &Field, value: &dyn TraceValue) {
        let idx = field.index();
        if idx >= 64 {
            return;
        }
        let f = &mut *self.0;
        let start = f.words.len() as u32;
        value.encode(&mut f.words);
        f.ranges.push((idx as u32, start, f.words.len() as u32));
    }

    fn put_text(&mut self, field: &Field, fill: impl FnOnce(&mut String)) {
        let mut text = std::mem::take(&mut self.0.text);
        text.clear();
        fill(&mut text);
        self.put(field, &text.as_str());
        self.0.text = text;
    }
}

impl Visit for Visitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, &value)
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, &value)
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, &value)
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        match i64::try_from(value) {
            Ok(v) => self.put(field, &v),
            Err(_) => self.put_text(field, |t| {
                let _ = write!(t, "{value}");
            }),
        }
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        match u64::try_from(value) {
            Ok(v) => self.put(field, &v),
            Err(_) => self.put_text(field, |t| {
                let _ = write!(t, "{value}");
            }),
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, &value)
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, &value)
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put_text(field, |t| {
            let _ = write!(t, "{value}");
        })
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put_text(field, |t| {
            let _ = write!(t, "{value:?}");
        })
    }
}

thread_local! {
    static SCRATCH: RefCell<Fields> = RefCell::new(Fields::default());
}

/// Runs `f` with this thread's cleared scratch (a fresh one if it is in use:
/// a `Debug` impl that emits an event while being formatted).
fn with_scratch<R>(f: impl FnOnce(&mut Fields) -> R) -> R {
    let mut f = Some(f);
    let r = SCRATCH
        .try_with(|s| {
            s.try_borrow_mut().ok().map(|mut s| {
                s.clear();
                (f.take().unwrap())(&mut s)
            })
        })
        .ok()
        .flatten();
    match r {
        Some(r) => r,
        None => (f.take().unwrap())(&mut Fields::default()),
    }
}

/// Pre-encoded arg words, written as they are.
struct Words<'a>(&'a [u64]);

impl ArgList for Words<'_> {
    const LEN: usize = 0;
    fn words(&self) -> usize {
        self.0.len()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        for &w in self.0 {
            out.push(w);
        }
    }
}

// ---------------------------------------------------------------------------
// Spans

/// Async range ids of the layer: bit 62 set, so they never meet the ids of
/// `#[trace] async fn` ranges.
const ASYNC_ID_BASE: u64 = 1 << 62;
/// Relaxed: only uniqueness matters.
static NEXT_ASYNC_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_FLOW_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD_KEY: AtomicU64 = AtomicU64::new(1);
/// Number of spans whose next slice end has something to carry (fields
/// recorded, flows). While it is 0, an exit writes a bare END without
/// looking the span up. Relaxed: a value recorded on another thread without
/// synchronisation with the exit may as well be carried by the next end.
static END_PENDING: AtomicU64 = AtomicU64::new(0);
/// Number of async spans not dropped yet. While it and `END_PENDING` are 0,
/// a close has nothing to write and does not look the span up.
static ASYNC_LIVE: AtomicU64 = AtomicU64::new(0);

/// What ringtrace keeps of a span: in its registry extensions (layer) or its
/// span table slot (subscriber).
pub(crate) struct SpanData {
    info: &'static SiteInfo,
    /// The call site for the fields present now.
    site: &'static Callsite,
    /// Values of the present fields in field order: what each begin carries.
    words: Vec<u64>,
    /// (field index, start, end) into `words`, in field order.
    ranges: Vec<(u32, u32, u32)>,
    mask: u64,
    /// Tick count at creation: where an async range begins.
    created: u64,
    /// The thread (`thread_key`) of the first enter; 0 before it.
    thread: u64,
    /// Id of the async range, 0 while the span is not async.
    async_id: u64,
    /// Fields recorded since the last begin: carried by the next end.
    dirty: u64,
    /// Fields recorded since the async range began: carried by its end.
    dirty_async: u64,
    /// Flow ids (with `FLOW_IN`) waiting for this span's next slice end.
    flows: Vec<u64>,
}

impl SpanData {
    #[inline]
    fn new(info: &'static SiteInfo, created: u64) -> SpanData {
        SpanData {
            info,
            site: info.full,
            words: Vec::new(),
            ranges: Vec::new(),
            mask: 0,
            created,
            thread: 0,
            async_id: 0,
            dirty: 0,
            dirty_async: 0,
            flows: Vec::new(),
        }
    }

    /// The values a span was created with.
    fn set_values(&mut self, fields: &Fields) {
        if fields.in_order() {
            self.words = fields.words.clone();
            self.ranges = fields.ranges.clone();
        } else {
            self.merge(fields);
        }
        self.mask = fields.mask();
        self.site = self.info.site(self.mask);
    }

    /// Takes the values in `fields` (recorded later), replacing old ones.
    fn merge(&mut self, fields: &Fields) {
        (self.words, self.ranges) = merge_values(&self.words, &self.ranges, fields);
    }

    /// Whether closing the span writes anything: the end of its async range,
    /// or flows no slice end carried.
    pub(crate) fn must_close(&self) -> bool {
        self.async_id != 0 || !self.flows.is_empty()
    }

    fn end_pending(&self) -> bool {
        self.dirty != 0 || !self.flows.is_empty()
    }

    /// Runs `f`, keeping `END_PENDING` in step with this span's state.
    fn tracking<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
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

    fn record(&mut self, fields: &Fields) {
        let m = fields.mask();
        self.merge(fields);
        self.mask |= m;
        self.dirty |= m;
        self.dirty_async |= m;
        self.site = self.info.site(self.mask);
    }

    /// The values of the fields in `mask`, in field order.
    fn words_of(&self, mask: u64, out: &mut Vec<u64>) {
        for &(i, s, e) in &self.ranges {
            if mask >> i & 1 == 1 {
                out.extend_from_slice(&self.words[s as usize..e as usize]);
            }
        }
    }

    /// Makes the span async: its range begins at its creation.
    fn begin_async(&mut self, tr: &ThreadRing) {
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
            &Words(&self.words),
        );
    }

    /// Writes the pending flows; the next end record binds them.
    fn write_flows(&mut self, tr: &ThreadRing, ts: u64) {
        if !self.flows.is_empty() {
            layout::write(&tr.ring, KIND_FLOW, 0, ts, &self.flows, &());
            self.flows.clear();
        }
    }

    /// Ends this span's slice that began at `depth` on this thread.
    fn end_slice(&mut self, tr: &ThreadRing, depth: u32, ts: u64) {
        self.write_flows(tr, ts);
        let depth = depth.min(MAX_DEPTH) as u64;
        if self.dirty == 0 {
            layout::write(&tr.ring, KIND_END, depth, ts, &[], &());
        } else {
            let site = self.info.site(self.dirty);
            let mut args = Vec::new();
            self.words_of(self.dirty, &mut args);
            self.dirty = 0;
            let payload = site.id() as u64 | depth << 24;
            layout::write(&tr.ring, KIND_END_ARGS, payload, ts, &args, &());
        }
    }

    /// Begins a slice of this span at the thread's current depth; returns
    /// that depth if it was recorded.
    fn begin_slice(&mut self, tr: &ThreadRing, ts: u64) -> Option<u32> {
        let depth = tr.depth.load(Ordering::Relaxed);
        let payload = self.site.id() as u64 | (depth.min(MAX_DEPTH) as u64) << 24;
        if layout::write(&tr.ring, KIND_BEGIN, payload, ts, &self.words, &()) {
            tr.depth.store(depth.saturating_add(1), Ordering::Relaxed);
            self.dirty = 0;
            Some(depth)
        } else {
            None
        }
    }
}

/// Values of `old_*` (field order) with those of `fields` (recorded later)
/// replacing or joining them, in field order.
fn merge_values(
    old_words: &[u64],
    old_ranges: &[(u32, u32, u32)],
    fields: &Fields,
) -> (Vec<u64>, Vec<(u32, u32, u32)>) {
    let new = fields.ordered_ranges();
    let mut words = Vec::with_capacity(old_words.len() + fields.words.len());
    let mut ranges = Vec::with_capacity(old_ranges.len() + new.len());
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
    (words, ranges)
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
#[derive(Debug, Clone, Copy)]
struct Entered {
    id: u64,
    /// Depth its begin record carries (valid if `recorded`).
    depth: u32,
    /// Session of the ring it was recorded into.
    session: u64,
    recorded: bool,
}

thread_local! {
    /// Spans entered on this thread, innermost last.
    static STACK: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
    /// This thread's key for "entered on another thread" (0: not assigned).
    static THREAD_KEY: Cell<u64> = const { Cell::new(0) };
}

fn thread_key() -> u64 {
    THREAD_KEY
        .try_with(|k| {
            if k.get() == 0 {
                k.set(NEXT_THREAD_KEY.fetch_add(1, Ordering::Relaxed));
            }
            k.get()
        })
        .unwrap_or(u64::MAX)
}

fn push_entered(e: Entered) {
    let _ = STACK.try_with(|s| s.borrow_mut().push(e));
}

/// The id of the innermost span entered on this thread, if any.
pub(crate) fn current_entered() -> Option<u64> {
    STACK
        .try_with(|s| s.borrow().last().map(|e| e.id))
        .ok()
        .flatten()
}

// ---------------------------------------------------------------------------
// Callbacks

/// A new span: its state, or `None` when its category is off (then it is
/// not recorded at all).
pub(crate) fn new_span(attrs: &Attributes<'_>) -> Option<SpanData> {
    let mut state = None;
    new_span_into(attrs, &mut state);
    state
}

/// As [`new_span`], into `state` (the subscriber's slot: no move).
#[inline]
pub(crate) fn new_span_into(attrs: &Attributes<'_>, state: &mut Option<SpanData>) {
    let info = site_info(attrs.metadata());
    if !info.full.is_enabled() {
        *state = None;
        return;
    }
    let created = ticks();
    let data = state.insert(SpanData::new(info, created));
    if attrs.values().is_empty() {
        data.site = info.site(0); // fields declared `Empty`: no arg names
    } else {
        with_scratch(|f| {
            attrs.record(&mut Visitor(f));
            data.set_values(f);
        });
    }
}

/// Whether spans and events of this call site are recorded now.
pub(crate) fn enabled(meta: &'static Metadata<'static>) -> bool {
    site_info(meta).full.is_enabled()
}

/// As [`enabled`], for metadata that may not be `'static`: a call site not
/// seen yet is let through (its span or event, whose metadata is `'static`,
/// is checked again).
pub(crate) fn enabled_any(meta: &Metadata<'_>) -> bool {
    let key = meta as *const Metadata<'_> as usize;
    let info = cached_site(key).or_else(|| SITES.read().get(&key).copied());
    info.is_none_or(|info| info.full.is_enabled())
}

/// `Span::record`: the values join the span's state.
pub(crate) fn record(store: &impl SpanStore, id: &Id, values: &SpanValues<'_>) {
    store.with_data(id, |data| {
        with_scratch(|f| {
            values.record(&mut Visitor(f));
            if !f.ranges.is_empty() {
                data.tracking(|d| d.record(f));
            }
        })
    });
}

/// `id.follows_from(follows)`: a flow between them.
pub(crate) fn follows_from(store: &impl SpanStore, id: &Id, follows: &Id) {
    let has = |i: &Id| store.with_data(i, |_| ()).is_some();
    if !has(id) || !has(follows) {
        return;
    }
    let flow = NEXT_FLOW_ID.fetch_add(1, Ordering::Relaxed) & !FLOW_IN;
    store.with_data(follows, |d| d.tracking(|d| d.flows.push(flow)));
    store.with_data(id, |d| d.tracking(|d| d.flows.push(flow | FLOW_IN)));
}

/// An event: an instant with its fields and level.
pub(crate) fn event(event: &Event<'_>) {
    let meta = event.metadata();
    let info = site_info(meta);
    if !info.full.is_enabled() {
        return;
    }
    let ts = ticks();
    with_scratch(|f| {
        event.record(&mut Visitor(f));
        let site = info.site(f.mask());
        let words = f.ordered();
        meta.level().as_str().encode(words);
        with_current(|tr| layout::write(&tr.ring, KIND_INSTANT, site.id() as u64, ts, words, &()));
    });
}

/// Span `id` is entered on this thread: a slice begins.
pub(crate) fn enter(store: &impl SpanStore, id: &Id) {
    let ts = ticks();
    let mut entered = Entered {
        id: id.into_u64(),
        depth: 0,
        session: 0,
        recorded: false,
    };
    store.with_data(id, |data| {
        if !data.site.is_enabled() {
            return;
        }
        let key = thread_key();
        with_current(|tr| {
            if data.thread == 0 {
                data.thread = key;
            } else if data.thread != key {
                data.begin_async(tr); // entered on a second thread
            }
            entered.session = tr.session;
            if let Some(depth) = data.tracking(|d| d.begin_slice(tr, ts)) {
                entered.depth = depth;
                entered.recorded = true;
            }
        });
    });
    push_entered(entered);
}

/// Span `id` exits on this thread: its slice ends.
pub(crate) fn exit(store: &impl SpanStore, id: &Id) {
    let ts = ticks();
    let id64 = id.into_u64();
    // Take this span's entry, and the entries above it if any.
    let taken = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        let pos = s.iter().rposition(|e| e.id == id64)?;
        let above = if pos + 1 < s.len() {
            s.split_off(pos + 1)
        } else {
            Vec::new()
        };
        Some((s.pop().unwrap(), above))
    });
    let Ok(Some((entry, above))) = taken else {
        return;
    };
    if above.is_empty() {
        if entry.recorded {
            with_current(|tr| {
                if tr.session == entry.session {
                    // Fast path: no span has anything for its end.
                    let bare = END_PENDING.load(Ordering::Relaxed) == 0
                        || store
                            .with_data(id, |d| d.tracking(|d| d.end_slice(tr, entry.depth, ts)))
                            .is_none();
                    if bare {
                        let depth = entry.depth.min(MAX_DEPTH) as u64;
                        layout::write(&tr.ring, KIND_END, depth, ts, &[], &());
                    }
                    tr.depth.store(entry.depth, Ordering::Relaxed);
                }
            });
        }
        return;
    }
    let reopened = exit_out_of_order(store, id, entry, above, ts);
    let _ = STACK.try_with(|s| s.borrow_mut().extend(reopened));
}

/// Span `id` closes (its last handle dropped): an async span's range ends,
/// flows no slice end carried are written.
pub(crate) fn close(store: &impl SpanStore, id: &Id) {
    if END_PENDING.load(Ordering::Relaxed) == 0 && ASYNC_LIVE.load(Ordering::Relaxed) == 0 {
        return; // no span is async or has flows: nothing to write
    }
    let ts = ticks();
    store.with_data(id, |data| {
        if data.async_id == 0 && data.flows.is_empty() {
            return;
        }
        with_current(|tr| {
            // Flows no slice end carried: the span's range carries them
            // (on its begin if it begins now: JSON binds flows to `b`).
            if data.async_id == 0 {
                data.tracking(|d| d.write_flows(tr, ts));
                data.begin_async(tr);
            }
            data.tracking(|d| d.write_flows(tr, ts));
            let site = data.info.site(data.dirty_async);
            let mut fixed = vec![data.async_id];
            data.words_of(data.dirty_async, &mut fixed);
            layout::write(&tr.ring, KIND_ASYNC_END, site.id() as u64, ts, &fixed, &());
        });
    });
}

/// Span `id` exits while the spans of `above` (entered after it, on this
/// thread) are still entered: ends their slices, ends its own, and begins
/// theirs again; all of them become async. Returns the entries of `above`
/// with their new depths.
fn exit_out_of_order(
    store: &impl SpanStore,
    id: &Id,
    entry: Entered,
    mut above: Vec<Entered>,
    ts: u64,
) -> Vec<Entered> {
    with_current(|tr| {
        let live = |e: &Entered| e.recorded && e.session == tr.session;
        let base = std::iter::once(&entry)
            .chain(above.iter())
            .filter(|e| live(e))
            .map(|e| e.depth)
            .min();
        for e in above.iter().rev().filter(|e| live(e)) {
            layout::write(
                &tr.ring,
                KIND_END,
                e.depth.min(MAX_DEPTH) as u64,
                ts,
                &[],
                &(),
            );
        }
        store.with_data(id, |d| {
            if live(&entry) {
                d.tracking(|d| d.end_slice(tr, entry.depth, ts));
            }
            d.begin_async(tr);
        });
        if let Some(base) = base {
            tr.depth.store(base, Ordering::Relaxed);
        }
        for e in above.iter_mut() {
            if !live(e) {
                continue;
            }
            let depth = store
                .with_data(&Id::from_u64(e.id), |d| {
                    d.begin_async(tr);
                    d.tracking(|d| d.begin_slice(tr, ts))
                })
                .flatten();
            match depth {
                Some(depth) => e.depth = depth,
                None => e.recorded = false,
            }
        }
    });
    above
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(values: &[(u32, i64)]) -> Fields {
        let mut f = Fields::default();
        for &(i, v) in values {
            let start = f.words.len() as u32;
            v.encode(&mut f.words);
            f.ranges.push((i, start, f.words.len() as u32));
        }
        f
    }

    fn values(words: &[u64], ranges: &[(u32, u32, u32)]) -> Vec<(u32, i64)> {
        ranges
            .iter()
            .map(|&(i, s, _)| (i, words[s as usize + 1] as i64))
            .collect()
    }

    #[test]
    fn values_come_out_in_field_order_last_visit_wins() {
        let mut f = fields(&[(2, 20), (0, 1), (2, 21)]);
        assert!(!f.in_order());
        assert_eq!(f.mask(), 0b101);
        let expect: Vec<u64> = fields(&[(0, 1), (2, 21)]).words;
        assert_eq!(*f.ordered(), expect);
    }

    #[test]
    fn recorded_values_replace_and_join_in_field_order() {
        let old = fields(&[(0, 1), (3, 3)]);
        let (w, r) = merge_values(
            &old.words,
            &old.ranges,
            &fields(&[(3, 30), (1, 10), (5, 50)]),
        );
        assert_eq!(values(&w, &r), [(0, 1), (1, 10), (3, 30), (5, 50)]);
        let (w, r) = merge_values(&[], &[], &fields(&[(4, 4)]));
        assert_eq!(values(&w, &r), [(4, 4)]);
    }
}
