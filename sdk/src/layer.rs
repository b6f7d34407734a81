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
//! Most of a span's cost through this layer is `tracing-subscriber`'s
//! registry (its span slab, parent links, extension maps and per-layer filter
//! state), not ringtrace's recording: on a 2-vCPU AMD EPYC VM a span's whole
//! life (new, enter, exit, close) took about 290 ns through the layer, 140 ns
//! through the registry with a do-nothing layer behind a per-layer filter,
//! and 90 ns through [`subscriber()`], which records the same trace without
//! the registry. The README's Performance section has the measurements
//! against tracing-chrome, tracing-perfetto and tracing-perfetto-sdk, and how
//! to rerun them (`benches/peers`).

#![forbid(unsafe_code)]

use crate::bridge::{self, SpanData, SpanStore};
use crate::session::{Builder, Error, Format, TraceGuard};
use crate::subscriber::RingtraceSubscriber;
use std::fmt;
use std::io::Write;
use std::marker::PhantomData;
use std::path::Path;
use std::time::Duration;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Subscriber};
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
    TracingBuilder::from(crate::session::builder())
}

/// Starts configuring a session recorded through ringtrace's own `tracing`
/// subscriber: the fastest way to record `tracing` spans, with no registry
/// (see [`RingtraceSubscriber`] for what it gives up).
///
/// It takes every option of [`builder()`](crate::builder);
/// [`SubscriberBuilder::build`] starts the session and returns the
/// subscriber with the session's guard.
///
/// # Examples
///
/// ```
/// use tracing_subscriber::prelude::*; // for `.with(filter)`
/// let path = std::env::temp_dir().join("ringtrace-doc-subscriber.pftrace");
/// let (subscriber, trace) = ringtrace::subscriber().output(&path).build()?;
/// let subscriber = subscriber.with(tracing_subscriber::filter::LevelFilter::INFO);
/// tracing::subscriber::with_default(subscriber, || {
///     let span = tracing::info_span!("request", id = 7);
///     let _entered = span.enter();
///     tracing::info!(bytes = 512, "sent");
///     tracing::debug!("filtered out");
/// });
/// trace.stop()?;
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn subscriber() -> SubscriberBuilder {
    TracingBuilder::from(crate::session::builder())
}

/// Configures a session recorded through `tracing`; [`build`](Self::build)
/// returns `T`, the layer ([`LayerBuilder`], made by [`layer()`]) or the
/// subscriber ([`SubscriberBuilder`], made by [`subscriber()`]). Also made
/// from a [`Builder`] with `LayerBuilder::from(builder)`.
#[must_use = "nothing is recorded until `build()` is called"]
pub struct TracingBuilder<T> {
    inner: Builder,
    kind: PhantomData<fn() -> T>,
}

/// Configures a session recorded through a `tracing` layer.
pub type LayerBuilder = TracingBuilder<RingtraceLayer>;

/// Configures a session recorded through ringtrace's `tracing` subscriber.
pub type SubscriberBuilder = TracingBuilder<RingtraceSubscriber>;

impl<T> From<Builder> for TracingBuilder<T> {
    fn from(inner: Builder) -> Self {
        TracingBuilder {
            inner,
            kind: PhantomData,
        }
    }
}

impl<T> fmt::Debug for TracingBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TracingBuilder").finish_non_exhaustive()
    }
}

/// What a [`TracingBuilder`] builds: [`RingtraceLayer`] or [`RingtraceSubscriber`].
pub trait TracingRecorder: sealed::FromSession {}

impl TracingRecorder for RingtraceLayer {}
impl TracingRecorder for RingtraceSubscriber {}

pub(crate) mod sealed {
    /// Made once its session has started.
    pub trait FromSession {
        fn from_session() -> Self;
    }
}

impl sealed::FromSession for RingtraceLayer {
    fn from_session() -> Self {
        RingtraceLayer { _private: () }
    }
}

impl<T: TracingRecorder> TracingBuilder<T> {
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

    /// As [`Builder::buffer_bytes`].
    pub fn buffer_bytes(self, bytes: u64) -> Self {
        self.map(|b| b.buffer_bytes(bytes))
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
        TracingBuilder::from(f(self.inner))
    }

    /// Starts the session and returns the layer (to add to a
    /// `tracing_subscriber::registry()`) or the subscriber (to set as the
    /// default), and the session's guard (the trace is finished when it
    /// drops, at `std::process::exit`, or when `main` panics, as with
    /// [`Builder::start`]).
    ///
    /// # Errors
    ///
    /// As [`Builder::start`]: [`Error::AlreadyStarted`], [`Error::Io`],
    /// [`Error::UnknownFormat`], [`Error::NoOutput`], ...
    pub fn build(self) -> Result<(T, TraceGuard), Error> {
        let guard = self.inner.start()?;
        Ok((T::from_session(), guard))
    }
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

/// Span state kept in the registry's extensions of each span.
struct Extensions<'a, 'b, S>(&'a Context<'b, S>);

impl<S> SpanStore for Extensions<'_, '_, S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        let span = self.0.span(id)?;
        let mut ext = span.extensions_mut();
        ext.get_mut::<SpanData>().map(f)
    }
}

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(data) = bridge::new_span(attrs) {
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(data);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
        bridge::record(&Extensions(&ctx), id, values);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        bridge::follows_from(&Extensions(&ctx), id, follows);
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        bridge::event(event);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        bridge::enter(&Extensions(&ctx), id);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        bridge::exit(&Extensions(&ctx), id);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        bridge::close(&Extensions(&ctx), &id);
    }
}
