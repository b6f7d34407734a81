//! ringtrace as a [`tracing_subscriber::Layer`]: spans become slices, events
//! become instants, in the same per-thread rings, flusher and encoders as the
//! macros (feature `tracing`, on by default).
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//! let (layer, _trace) = ringtrace::layer().output("trace.pftrace").build()?;
//! tracing_subscriber::registry().with(layer).init();
//! # Ok::<(), ringtrace::Error>(())
//! ```
//!
//! # What is recorded
//!
//! | `tracing` | Perfetto | Chrome JSON |
//! | --- | --- | --- |
//! | span entered / exited | SLICE_BEGIN / SLICE_END on the thread track | `X` on the thread |
//! | span fields at creation | debug annotations of each slice | `args` of each `X` |
//! | `Span::record` while entered | annotations on the SLICE_END (readers merge them into the slice) | merged into the `X`'s `args` (the recorded value wins) |
//! | `Span::record` while not entered | on the following slices | on the following `X`s |
//! | span on two threads or exited out of order | + an async track, creation to close | + `b`/`e` (`id2.local`) |
//! | event | INSTANT with the fields and `level` as args | `i` (`"s":"t"`) with the same args |
//! | `follows_from` | `flow_ids` on both slices | v2 `bind_id` + `flow_out`/`flow_in` on both `X`s |
//!
//! * **Names and categories.** A span's slice is named after the span; an
//!   event's instant after the event (`tracing` names events
//!   `"event file:line"` unless given `name:`). The category of both is the
//!   `target` (by default the module path, e.g. `my_app::db`), so ringtrace's
//!   category filter selects targets: `ringtrace::enable_categories(["my_app*"])`.
//!   An event carries its `message` and fields as args, and its level as the
//!   arg `level` (`"TRACE"` .. `"ERROR"`). Levels, targets and span names are
//!   filtered before ringtrace sees them by `tracing-subscriber`'s per-layer
//!   filters (`EnvFilter`, `Targets`, `LevelFilter`) with `.with_filter(..)`.
//!   A span whose category is off when it is created is not recorded at all.
//! * **Async spans.** A span is *async* once it is entered on a second
//!   thread, or exited while a span entered after it is still entered on the
//!   thread (out of stack order), or is the source or destination of a flow
//!   that no slice end could carry. From then on it also has an async track
//!   of its own with one slice from the span's creation to its close
//!   (written when found out, with the creation timestamp); each enter/exit
//!   still shows as a slice on the thread that ran it. A thread track always
//!   nests: an out-of-order exit ends the slices entered after the exiting
//!   span, ends it, and begins the others again where they were (they become
//!   async too, so their whole life stays visible on one track). Ends carry
//!   the depth of their begin, which is how encoders pair them.
//! * **Flows.** `b.follows_from(a)` gives the flow a process-unique id and
//!   binds it to the next slice end of each span (the end of its current or
//!   next enter). A span that closes with a flow still unbound (it was not
//!   entered again) carries it on its async range, which it gets then if it
//!   had none. Perfetto draws the arrow from the earlier slice to the later
//!   one. A Chrome JSON event binds one flow (v2 `bind_id`), on an `X` or a
//!   `b`, never on an `e`: a second flow of one slice, or one left for the
//!   end of an existing async range, is only in the Perfetto output.
//!
//! # Cost
//!
//! Per tracing callsite, one ringtrace `Callsite` is made (a leaked box,
//! registered like a macro's `static`), plus one per distinct set of fields
//! present (spans with `Empty` fields). A span's fields are encoded once, when
//! the span is created (into its registry extensions); entering it copies
//! those words into the ring: no allocation, no formatting, no lock but the
//! span's own extension lock. Formatting (`Debug` fields, messages) happens
//! into a reusable thread-local buffer. An exit or a close looks the span up
//! only while some span has something for its end (fields recorded, flows)
//! or is async; otherwise it writes a bare END (or nothing) at once.
//!
//! Measured with `cargo bench --bench layer` in `benches/peers/` (2-vCPU AMD EPYC VM, medians of
//! 11 x 50 000; the machine is noisy, runs vary by ~30%): a span's whole life
//! (new with two fields, enter, exit, close) ~230-290 ns, of which ~120 ns is
//! `tracing`'s registry with no layer; enter + exit of a live span ~60 ns; an
//! event with a message and two fields ~60 ns. In the same run tracing-chrome
//! took ~1.9-3.1 us per span life, ~0.7-1.0 us per enter/exit and ~1.8 us per
//! event; tracing-perfetto ~2.0-3.2 us per span life and ~1.4-2.1 us per event
//! (it records nothing at enter/exit).

#![forbid(unsafe_code)]

use crate::args::{ArgList, TraceValue, WordSink};
use crate::callsite::{Callsite, CallsiteKind};
use crate::clock::ticks;
use crate::record::{
    self, FLOW_IN, KIND_ASYNC_BEGIN, KIND_ASYNC_END, KIND_BEGIN, KIND_END, KIND_END_ARGS,
    KIND_FLOW, KIND_INSTANT, MAX_DEPTH,
};
use crate::registry::{with_current, ThreadRing};
use crate::session::{Builder, Error, Format, TraceGuard};
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

// ---------------------------------------------------------------------------
// Builder

/// Starts configuring a session recorded through a `tracing` layer.
///
/// It takes every option of [`builder()`](crate::builder); [`LayerBuilder::build`]
/// starts the session and returns the layer with the session's guard.
///
/// # Examples
///
/// ```
/// use tracing_subscriber::prelude::*;
/// let path = std::env::temp_dir().join("ringtrace-doc-layer.pftrace");
/// let (layer, trace) = ringtrace::layer().output(&path).build()?;
/// let subscriber = tracing_subscriber::registry().with(layer);
/// tracing::subscriber::with_default(subscriber, || {
///     let span = tracing::info_span!("request", id = 7);
///     let _entered = span.enter();
///     tracing::info!(bytes = 512, "sent");
/// });
/// trace.stop()?; // or let it drop: the file is complete either way
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn layer() -> LayerBuilder {
    LayerBuilder {
        inner: crate::session::builder(),
    }
}

/// Configures a session recorded through a `tracing` layer. Made by
/// [`layer()`], or from a [`Builder`] with `LayerBuilder::from(builder)`.
#[must_use = "nothing is recorded until `build()` is called"]
pub struct LayerBuilder {
    inner: Builder,
}

impl From<Builder> for LayerBuilder {
    fn from(inner: Builder) -> Self {
        LayerBuilder { inner }
    }
}

impl fmt::Debug for LayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LayerBuilder").finish_non_exhaustive()
    }
}

impl LayerBuilder {
    /// As [`Builder::output`]: the trace file; its extension picks the format.
    pub fn output(self, path: impl AsRef<Path>) -> Self {
        self.map(|b| b.output(path))
    }

    /// As [`Builder::writer`].
    pub fn writer(self, w: impl Write + Send + 'static) -> Self {
        self.map(|b| b.writer(w))
    }

    /// As [`Builder::format`].
    pub fn format(self, format: Format) -> Self {
        self.map(|b| b.format(format))
    }

    /// As [`Builder::buffer_bytes_per_thread`].
    pub fn buffer_bytes_per_thread(self, bytes: usize) -> Self {
        self.map(|b| b.buffer_bytes_per_thread(bytes))
    }

    /// As [`Builder::overwrite`].
    pub fn overwrite(self, overwrite: bool) -> Self {
        self.map(|b| b.overwrite(overwrite))
    }

    /// As [`Builder::enable_categories`]; categories are `tracing` targets.
    pub fn enable_categories<I, S>(self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.map(|b| b.enable_categories(patterns))
    }

    /// As [`Builder::disable_categories`]; categories are `tracing` targets.
    pub fn disable_categories<I, S>(self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.map(|b| b.disable_categories(patterns))
    }

    /// As [`Builder::flush_interval`].
    pub fn flush_interval(self, interval: Duration) -> Self {
        self.map(|b| b.flush_interval(interval))
    }

    /// As [`Builder::process_name`].
    pub fn process_name(self, name: impl Into<String>) -> Self {
        self.map(|b| b.process_name(name))
    }

    /// As [`Builder::source_locations`].
    pub fn source_locations(self, on: bool) -> Self {
        self.map(|b| b.source_locations(on))
    }

    /// As [`Builder::compact_packets`].
    pub fn compact_packets(self, on: bool) -> Self {
        self.map(|b| b.compact_packets(on))
    }

    /// As [`Builder::compressed_packets`].
    pub fn compressed_packets(self, on: bool) -> Self {
        self.map(|b| b.compressed_packets(on))
    }

    /// Applies any [`Builder`] option, including ones added after this type.
    pub fn configure(self, f: impl FnOnce(Builder) -> Builder) -> Self {
        self.map(f)
    }

    fn map(self, f: impl FnOnce(Builder) -> Builder) -> Self {
        LayerBuilder {
            inner: f(self.inner),
        }
    }

    /// Starts the session and returns the layer to add to a
    /// `tracing_subscriber::registry()`, and the session's guard (the trace is
    /// finished when it drops, at `std::process::exit`, or when `main`
    /// panics, as with [`Builder::start`]).
    ///
    /// # Errors
    ///
    /// As [`Builder::start`]: [`Error::AlreadyStarted`], [`Error::Io`],
    /// [`Error::UnknownFormat`], [`Error::NoOutput`], ...
    pub fn build(self) -> Result<(RingtraceLayer, TraceGuard), Error> {
        let guard = self.inner.start()?;
        Ok((RingtraceLayer { _private: () }, guard))
    }
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

thread_local! {
    /// This thread's view of `SITES`, so events look their site up without a
    /// shared lock.
    static SITE_CACHE: RefCell<SiteMap> = RefCell::new(SiteMap::default());
}

fn site_info(meta: &'static Metadata<'static>) -> &'static SiteInfo {
    let key = meta as *const Metadata<'static> as usize;
    let cached = SITE_CACHE.try_with(|c| c.borrow().get(&key).copied());
    if let Ok(Some(info)) = cached {
        return info;
    }
    let info = site_info_slow(key, meta);
    let _ = SITE_CACHE.try_with(|c| c.borrow_mut().insert(key, info));
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

/// What the layer keeps in a span's registry extensions.
struct SpanData {
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
    /// The thread (layer key) of the first enter; 0 before it.
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
    fn new(info: &'static SiteInfo, created: u64, fields: &mut Fields) -> SpanData {
        let mut data = SpanData {
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
        };
        if fields.in_order() {
            data.words = fields.words.clone();
            data.ranges = fields.ranges.clone();
        } else {
            data.merge(fields);
        }
        data.mask = fields.mask();
        data.site = info.site(data.mask);
        data
    }

    /// Takes the values in `fields` (recorded later), replacing old ones.
    fn merge(&mut self, fields: &Fields) {
        (self.words, self.ranges) = merge_values(&self.words, &self.ranges, fields);
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
        record::write(
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
            record::write(&tr.ring, KIND_FLOW, 0, ts, &self.flows, &());
            self.flows.clear();
        }
    }

    /// Ends this span's slice that began at `depth` on this thread.
    fn end_slice(&mut self, tr: &ThreadRing, depth: u32, ts: u64) {
        self.write_flows(tr, ts);
        let depth = depth.min(MAX_DEPTH) as u64;
        if self.dirty == 0 {
            record::write(&tr.ring, KIND_END, depth, ts, &[], &());
        } else {
            let site = self.info.site(self.dirty);
            let mut args = Vec::new();
            self.words_of(self.dirty, &mut args);
            self.dirty = 0;
            let payload = site.id() as u64 | depth << 24;
            record::write(&tr.ring, KIND_END_ARGS, payload, ts, &args, &());
        }
    }

    /// Begins a slice of this span at the thread's current depth; returns
    /// that depth if it was recorded.
    fn begin_slice(&mut self, tr: &ThreadRing, ts: u64) -> Option<u32> {
        let depth = tr.depth.load(Ordering::Relaxed);
        let payload = self.site.id() as u64 | (depth.min(MAX_DEPTH) as u64) << 24;
        if record::write(&tr.ring, KIND_BEGIN, payload, ts, &self.words, &()) {
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

/// Runs `f` on the layer's data of span `id`, if it has any.
fn with_data<S, R>(ctx: &Context<'_, S>, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let span = ctx.span(id)?;
    let mut ext = span.extensions_mut();
    ext.get_mut::<SpanData>().map(f)
}

// ---------------------------------------------------------------------------
// The layer

/// The `tracing` layer that records into the ringtrace session started by
/// [`LayerBuilder::build`]. Add it to a `tracing_subscriber::registry()`,
/// with or without a per-layer filter. Without a recording session it records
/// nothing.
#[derive(Debug)]
pub struct RingtraceLayer {
    _private: (),
}

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let info = site_info(attrs.metadata());
        if !info.full.is_enabled() {
            return;
        }
        let created = ticks();
        let Some(span) = ctx.span(id) else {
            return;
        };
        let data = with_scratch(|f| {
            attrs.record(&mut Visitor(f));
            SpanData::new(info, created, f)
        });
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
        with_data(&ctx, id, |data| {
            with_scratch(|f| {
                values.record(&mut Visitor(f));
                if !f.ranges.is_empty() {
                    data.tracking(|d| d.record(f));
                }
            })
        });
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        let has = |i: &Id| with_data(&ctx, i, |_| ()).is_some();
        if !has(id) || !has(follows) {
            return;
        }
        let flow = NEXT_FLOW_ID.fetch_add(1, Ordering::Relaxed) & !FLOW_IN;
        with_data(&ctx, follows, |d| d.tracking(|d| d.flows.push(flow)));
        with_data(&ctx, id, |d| d.tracking(|d| d.flows.push(flow | FLOW_IN)));
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
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
            with_current(|tr| {
                record::write(&tr.ring, KIND_INSTANT, site.id() as u64, ts, words, &())
            });
        });
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let ts = ticks();
        let mut entered = Entered {
            id: id.into_u64(),
            depth: 0,
            session: 0,
            recorded: false,
        };
        with_data(&ctx, id, |data| {
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

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
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
                            || with_data(&ctx, id, |d| {
                                d.tracking(|d| d.end_slice(tr, entry.depth, ts))
                            })
                            .is_none();
                        if bare {
                            let depth = entry.depth.min(MAX_DEPTH) as u64;
                            record::write(&tr.ring, KIND_END, depth, ts, &[], &());
                        }
                        tr.depth.store(entry.depth, Ordering::Relaxed);
                    }
                });
            }
            return;
        }
        let reopened = exit_out_of_order(&ctx, id, entry, above, ts);
        let _ = STACK.try_with(|s| s.borrow_mut().extend(reopened));
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if END_PENDING.load(Ordering::Relaxed) == 0 && ASYNC_LIVE.load(Ordering::Relaxed) == 0 {
            return; // no span is async or has flows: nothing to write
        }
        let ts = ticks();
        with_data(&ctx, &id, |data| {
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
                record::write(&tr.ring, KIND_ASYNC_END, site.id() as u64, ts, &fixed, &());
            });
        });
    }
}

/// Span `id` exits while the spans of `above` (entered after it, on this
/// thread) are still entered: ends their slices, ends its own, and begins
/// theirs again; all of them become async. Returns the entries of `above`
/// with their new depths.
fn exit_out_of_order<S>(
    ctx: &Context<'_, S>,
    id: &Id,
    entry: Entered,
    mut above: Vec<Entered>,
    ts: u64,
) -> Vec<Entered>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    with_current(|tr| {
        let live = |e: &Entered| e.recorded && e.session == tr.session;
        let base = std::iter::once(&entry)
            .chain(above.iter())
            .filter(|e| live(e))
            .map(|e| e.depth)
            .min();
        for e in above.iter().rev().filter(|e| live(e)) {
            record::write(
                &tr.ring,
                KIND_END,
                e.depth.min(MAX_DEPTH) as u64,
                ts,
                &[],
                &(),
            );
        }
        with_data(ctx, id, |d| {
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
            let depth = with_data(ctx, &Id::from_u64(e.id), |d| {
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
