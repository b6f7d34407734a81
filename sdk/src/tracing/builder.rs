//! `layer()` and `subscriber()`: one builder for both ways in from `tracing`,
//! taking every option of a session's [`Builder`].

use super::sample::{Decide, Sampler};
use super::sealed;
use super::{RingtraceLayer, RingtraceSubscriber};
use crate::session::{slow_rule, Builder, Error, Format, SlowRule, TraceGuard};
use std::fmt;
use std::io::Write;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
    sampling: Sampling,
    /// `capture_slow`'s patterns and threshold.
    slow: Option<SlowRule>,
    kind: PhantomData<fn() -> T>,
}

/// The sampling options, until `build` makes a [`Sampler`] of them.
#[derive(Default)]
struct Sampling {
    ratio: Option<f64>,
    roots: Vec<String>,
    decide: Option<Box<Decide>>,
}

/// Configures a session recorded through a `tracing` layer.
pub type LayerBuilder = TracingBuilder<RingtraceLayer>;

/// Configures a session recorded through ringtrace's `tracing` subscriber.
pub type SubscriberBuilder = TracingBuilder<RingtraceSubscriber>;

impl<T> From<Builder> for TracingBuilder<T> {
    fn from(inner: Builder) -> Self {
        TracingBuilder {
            inner,
            sampling: Sampling::default(),
            slow: None,
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

    /// Keeps whole requests at a rate: each *root* span (one with no
    /// parent) is kept with probability `ratio` (0.0 to 1.0; `0.01`: one
    /// root in a hundred), and every span and event under it, on whatever
    /// thread or task they run, follows its decision. A root not kept costs
    /// about what a subscriber that does nothing costs: ringtrace reads no
    /// clock, formats no field and writes no record for it or anything
    /// under it.
    ///
    /// * A span's parent is `tracing`'s (explicit `parent:`, else the span
    ///   entered on the thread when it is made): a task spawned inside a
    ///   request and instrumented with a span made there, or with
    ///   `in_current_span()`, follows the request. A span whose category is
    ///   off takes part all the same: it passes its parent's decision on
    ///   (and, as a root, is decided).
    /// * Events outside any span are recorded as without sampling; events
    ///   in a span follow the span's root.
    /// * Roots are decided once, on the thread that makes them, with a
    ///   per-thread random draw; [`sample_with`](Self::sample_with) decides
    ///   instead, [`sample_roots`](Self::sample_roots) limits which roots
    ///   are decided.
    /// * The session's [`Stats`](crate::Stats) count the roots kept and
    ///   skipped (`roots_kept`, `roots_skipped`), apart from losses. The
    ///   trace says it was sampled: a process-wide instant `sampling`
    ///   (category `ringtrace`) at the start, with the args `ratio`,
    ///   `roots` (the patterns, comma-joined, or `*`) and `hook` (whether
    ///   [`sample_with`](Self::sample_with) decides).
    /// * The macros (`trace_scope!`, ...), `#[trace]` and the typed event
    ///   API are not sampled: they record as always.
    ///
    /// Also set by `RINGTRACE_SAMPLE` in [`init_from_env`](Self::init_from_env).
    ///
    /// # Examples
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let path = std::env::temp_dir().join("ringtrace-doc-sampled.pftrace");
    /// let (layer, trace) = ringtrace::layer().output(&path).sample_ratio(0.01).build()?;
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
    ///     for id in 0..1000 {
    ///         let _request = tracing::info_span!("request", id).entered();
    ///         tracing::info!("handled"); // kept with its request, about 10 of 1000
    ///     }
    /// });
    /// let stats = trace.stop()?;
    /// assert_eq!(stats.roots_kept + stats.roots_skipped, 1000);
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn sample_ratio(mut self, ratio: f64) -> Self {
        self.sampling.ratio = Some(ratio);
        self
    }

    /// Decides only the roots whose name or target matches one of
    /// `patterns` (`prefix*` or a whole name, as categories), at the
    /// [`sample_ratio`](Self::sample_ratio) (1.0 if none is set); other
    /// roots are kept whole, uncounted. Replaces earlier patterns.
    pub fn sample_roots<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.sampling.roots = patterns
            .into_iter()
            .map(|p| p.as_ref().to_owned())
            .collect();
        self
    }

    /// Your own decision for each root: `decide` gets the root span's
    /// attributes (metadata and field values: visit them with
    /// `attrs.record(&mut visitor)`, for example to find a trace id your
    /// requests carry) and returns `Some(keep)`, or `None` to let the
    /// [`sample_ratio`](Self::sample_ratio) decide (1.0 if none is set).
    /// It runs on the thread that makes the root, at each root; keep it
    /// short and do not make spans in it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::fmt;
    /// use tracing::field::{Field, Visit};
    /// // Keeps every request whose propagated trace id is a multiple of 16.
    /// struct TraceId(Option<u64>);
    /// impl Visit for TraceId {
    ///     fn record_u64(&mut self, f: &Field, v: u64) {
    ///         if f.name() == "trace_id" { self.0 = Some(v) }
    ///     }
    ///     fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {}
    /// }
    /// let builder = ringtrace::subscriber()
    ///     .writer(ringtrace::MemoryBuffer::new())
    ///     .sample_with(|attrs| {
    ///         let mut id = TraceId(None);
    ///         attrs.record(&mut id);
    ///         id.0.map(|id| id % 16 == 0)
    ///     });
    /// # drop(builder);
    /// ```
    pub fn sample_with(
        mut self,
        decide: impl Fn(&tracing::span::Attributes<'_>) -> Option<bool> + Send + Sync + 'static,
    ) -> Self {
        self.sampling.decide = Some(Box::new(decide));
        self
    }

    /// Flight-recorder mode: each span whose name or target matches one of
    /// `patterns` (`prefix*` or a whole name) and closes more than
    /// `threshold` after it was created asks for a capture of its whole
    /// life, as [`trigger`](crate::trigger) does (the capture named after
    /// the span): the flusher writes what every thread recorded from
    /// [`Builder::capture_before`] before the span's creation to its close
    /// into a new file ([`Builder::capture_to`], which this needs, with
    /// [`overwrite`](Builder::overwrite)`(true)`), at most one per
    /// [`Builder::capture_interval`]. The recording thread only reads the
    /// clock and queues the request, at the close of a matching span. With
    /// [`sample_ratio`](Self::sample_ratio), a root not kept is not
    /// recorded, so it is never captured.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = std::env::temp_dir();
    /// let (subscriber, trace) = ringtrace::subscriber()
    ///     .output(dir.join("ringtrace-doc-slow.pftrace"))
    ///     .overwrite(true)
    ///     .configure(|b| b.capture_to(dir.join("ringtrace-doc-slow-{n}.pftrace")))
    ///     .capture_slow(["request"], Duration::from_millis(20))
    ///     .build()?;
    /// tracing::subscriber::with_default(subscriber, || {
    ///     let _slow = tracing::info_span!("request").entered();
    ///     std::thread::sleep(Duration::from_millis(25));
    /// });
    /// assert_eq!(trace.stop()?.captures_fired, 1);
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn capture_slow<I, S>(mut self, patterns: I, threshold: Duration) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.slow = Some(slow_rule(patterns, threshold));
        self
    }

    /// Applies the environment's configuration over this builder's, as
    /// [`init_from_env`](crate::init_from_env) reads it (its table), plus
    /// `RINGTRACE_SAMPLE` (a ratio from 0 to 1 for
    /// [`sample_ratio`](Self::sample_ratio), such as `0.01`) and
    /// `RINGTRACE_SAMPLE_ROOTS` (comma-separated patterns for
    /// [`sample_roots`](Self::sample_roots): `name`, `prefix*` or `*`; empty:
    /// none, as unset). Returns `None` if `RINGTRACE_OUTPUT` is unset or
    /// empty (record nothing; no other variable is read).
    ///
    /// # Errors
    ///
    /// As [`init_from_env`](crate::init_from_env): [`Error::InvalidConfig`]
    /// naming the variable and what it allows if a value is bad (not UTF-8,
    /// not a number, out of range, not a boolean, a malformed pattern), and
    /// also if `RINGTRACE_SAMPLE` is not a number (NaN included) or is
    /// outside 0 to 1, or a pattern of `RINGTRACE_SAMPLE_ROOTS` is malformed
    /// (`*` other than at the end, or a `-pattern`: roots are only listed).
    /// Then as [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```
    /// // RINGTRACE_OUTPUT=trace.pftrace RINGTRACE_SAMPLE=0.01 ./service
    /// if let Some((subscriber, _trace)) = ringtrace::subscriber().init_from_env()? {
    ///     tracing::subscriber::set_global_default(subscriber).ok();
    /// }
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn init_from_env(self) -> Result<Option<(T, TraceGuard)>, Error> {
        let TracingBuilder {
            inner,
            mut sampling,
            slow,
            ..
        } = self;
        let Some(inner) = crate::session::env_config(inner)? else {
            return Ok(None);
        };
        let (ratio, roots) = crate::session::env_sampling()?;
        if ratio.is_some() {
            sampling.ratio = ratio;
        }
        if let Some(roots) = roots {
            sampling.roots = roots;
        }
        TracingBuilder {
            inner,
            sampling,
            slow,
            kind: PhantomData,
        }
        .build()
        .map(Some)
    }

    fn map(self, f: impl FnOnce(Builder) -> Builder) -> Self {
        TracingBuilder {
            inner: f(self.inner),
            sampling: self.sampling,
            slow: self.slow,
            kind: PhantomData,
        }
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
        let s = self.sampling;
        let hook = !s.roots.is_empty() || s.decide.is_some();
        crate::session::warn_captures_with_sampling(self.slow.is_some(), s.ratio, hook);
        let sampler = (s.ratio.is_some() || !s.roots.is_empty() || s.decide.is_some())
            .then(|| Arc::new(Sampler::new(s.ratio.unwrap_or(1.0), s.roots, s.decide)));
        let guard = self.inner.start()?;
        if let Some(sampler) = &sampler {
            super::sample::announce(sampler);
        }
        let slow = self
            .slow
            .map(|(patterns, t)| Arc::new(super::slow::SlowRule::new(patterns, t)));
        Ok((T::from_session(sealed::Setup { sampler, slow }), guard))
    }
}
