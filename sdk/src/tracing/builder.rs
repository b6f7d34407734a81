//! The `tracing` side of [`Builder`]: its options for `tracing` spans
//! (whole-request sampling, slow spans; feature `tracing`) and its two
//! finishers, [`Builder::layer`] and [`Builder::subscriber`], which start
//! the session as [`Builder::start`] does and hand out the layer or the
//! subscriber that records into it.

use super::sample::Sampler;
use super::sealed;
use super::{RingtraceLayer, RingtraceSubscriber, SpanSlices};
use crate::session::{Builder, Error, SlowRule, TraceGuard};
use std::sync::Arc;
use std::time::Duration;

/// The options of `tracing` spans (feature `tracing`) and the finishers
/// that record them.
impl Builder {
    /// Keeps whole requests at a rate: each *root* span (one with no
    /// parent) is kept with probability `ratio` (0.0 to 1.0; `0.01`: one
    /// root in a hundred), and every span and event under it, on whatever
    /// thread or task they run, follows its decision. Of a request not
    /// kept, ringtrace reads no clock, formats no field and writes no
    /// record, and most of it is not made at all (below): it costs about
    /// what `tracing` costs with the request's categories off.
    ///
    /// * Not made: an event, and a span made while a span of a request not
    ///   kept is the innermost entered on its thread, once that span's call
    ///   site has been seen to stay nested (its first few spans are made
    ///   and watched), are disabled at the dispatch (`enabled` answers
    ///   false, for the whole subscriber: the registry makes no span and no
    ///   other layer of it sees them). A call site whose span was once
    ///   entered with nothing around it (a span moved to another task, as
    ///   with `tokio::spawn(fut.instrument(span))`) always makes its spans,
    ///   so they carry the decision into that task. Roots named by
    ///   [`sample_roots`](Self::sample_roots) are always made. A span or
    ///   event with an explicit `parent:` follows the span entered on its
    ///   thread at this step, not that parent.
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
    /// * The macros (`trace_scope!`, ...), `#[traced]` and the typed event
    ///   API are not sampled: they record as always.
    ///
    /// In effect for the layer or subscriber the builder is finished with
    /// ([`layer`](Self::layer), [`subscriber`](Self::subscriber)); a
    /// session [`start`](Self::start)ed alone records no `tracing` spans
    /// to sample. Needs the `tracing` feature (on by default). Also set by `RINGTRACE_SAMPLE` in
    /// [`from_env`](Self::from_env).
    ///
    /// # Examples
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let path = std::env::temp_dir().join("ringtrace-doc-sampled.pftrace");
    /// let (layer, trace) = ringtrace::builder().output(&path).sample_ratio(0.01).layer()?;
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
        self.spans.ratio = Some(ratio);
        self
    }

    /// Decides only the roots whose name or target matches one of
    /// `patterns` (`prefix*` or a whole name, as categories), at the
    /// [`sample_ratio`](Self::sample_ratio) (1.0 if none is set); other
    /// roots are kept whole, uncounted. Replaces earlier patterns. Needs
    /// the `tracing` feature; also set by `RINGTRACE_SAMPLE_ROOTS` in
    /// [`from_env`](Self::from_env).
    pub fn sample_roots<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.spans.roots = patterns
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
    /// short and do not make spans in it. Needs the `tracing` feature.
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
    /// let builder = ringtrace::builder()
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
        self.spans.decide = Some(Box::new(decide));
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
    /// recorded, so it is never captured. Needs the `tracing` feature (for
    /// the macros' scopes, use [`capture_slow_scopes`](Self::capture_slow_scopes)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = std::env::temp_dir();
    /// let (subscriber, trace) = ringtrace::builder()
    ///     .output(dir.join("ringtrace-doc-slow.pftrace"))
    ///     .overwrite(true)
    ///     .capture_to(dir.join("ringtrace-doc-slow-{n}.pftrace"))
    ///     .capture_slow(["request"], Duration::from_millis(20))
    ///     .subscriber()?;
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
        self.spans.slow = Some(SlowRule::new(patterns, threshold));
        self
    }

    /// Whether every slice of a `tracing` span carries all the span's
    /// fields (`true`), or only its first (`false`, the default).
    ///
    /// A span entered many times (an instrumented future, polled at each
    /// wake-up) gives a slice per enter. By default its fields are the debug
    /// annotations (Chrome JSON: `args`) of its first slice only; a later
    /// slice carries its name alone, plus the fields recorded
    /// (`Span::record`) since the slice before, and the span's async track,
    /// when it has one (entered on a second thread, or out of order), holds
    /// them all from creation to close. With `true`, each slice is
    /// self-contained (every slice can be read alone, e.g. after the
    /// first one was overwritten in a ring buffer), at a cost per enter: the
    /// fields are copied into the ring again and encoded again by the
    /// flusher (a few hundred instructions per enter for a handful of
    /// fields, more for strings). Needs the `tracing` feature (on by
    /// default).
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-every-slice.pftrace");
    /// let (subscriber, trace) = ringtrace::builder()
    ///     .output(&path)
    ///     .span_fields_every_slice(true)
    ///     .subscriber()?;
    /// tracing::subscriber::with_default(subscriber, || {
    ///     let span = tracing::info_span!("poll", task = 7);
    ///     for _ in 0..3 {
    ///         let _entered = span.enter(); // each slice carries `task`
    ///     }
    /// });
    /// trace.stop()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn span_fields_every_slice(mut self, every: bool) -> Self {
        self.spans.fields_every_slice = every;
        self
    }

    /// How each `tracing` span is drawn: a slice per enter on the entering
    /// thread's track ([`SpanSlices::Entered`], the default), or one slice
    /// from its creation to its close on a track of its own
    /// ([`SpanSlices::Lifetime`]).
    ///
    /// With `Lifetime`, a span's slice (Perfetto: an async track named after
    /// the span, under the process; Chrome JSON: a `b`/`e` pair with the
    /// span's id) carries its fields at creation as annotations and those
    /// recorded later (`Span::record`) on its end; `follows_from` flows are
    /// bound to its end. Enters and exits write nothing and read no clock,
    /// so a span entered once costs one record less than with `Entered`,
    /// and a future polled many times one record in all. Tracks are reused:
    /// a span takes a track of its name that no span holds at its creation,
    /// so a trace of a million requests has as many tracks per span name as
    /// were alive at once. Events stay instants on the thread that records
    /// them. Needs the `tracing` feature (on by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::SpanSlices;
    /// let path = std::env::temp_dir().join("ringtrace-doc-lifetime.pftrace");
    /// let (subscriber, trace) = ringtrace::builder()
    ///     .output(&path)
    ///     .span_slices(SpanSlices::Lifetime)
    ///     .subscriber()?;
    /// tracing::subscriber::with_default(subscriber, || {
    ///     let request = tracing::info_span!("request", id = 7);
    ///     for _ in 0..3 {
    ///         let _entered = request.enter(); // writes nothing
    ///     }
    /// }); // `request` closes: its one slice ends
    /// trace.stop()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn span_slices(mut self, slices: SpanSlices) -> Self {
        self.spans.lifetime_slices = slices == SpanSlices::Lifetime;
        self
    }

    /// Starts the session (as [`start`](Builder::start)) and returns a
    /// `tracing` layer that records into it, to add to a
    /// `tracing_subscriber::registry()` (with or without a per-layer
    /// filter), and the session's guard (the trace is finished when it
    /// drops, at `std::process::exit`, or when `main` panics). Needs the
    /// `tracing` feature (on by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let path = std::env::temp_dir().join("ringtrace-doc-layer.pftrace");
    /// let (layer, trace) = ringtrace::builder().output(&path).layer()?;
    /// let subscriber = tracing_subscriber::registry().with(layer);
    /// tracing::subscriber::with_default(subscriber, || {
    ///     let span = tracing::info_span!("request", id = 7);
    ///     let _entered = span.enter();
    ///     tracing::info!(bytes = 512, "sent");
    /// });
    /// trace.stop()?; // or let it drop: the file is complete either way
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Builder::start`]: [`Error::AlreadyStarted`], [`Error::Io`],
    /// [`Error::UnknownFormat`], [`Error::NoOutput`], ...
    pub fn layer(self) -> Result<(RingtraceLayer, TraceGuard), Error> {
        self.start_recording()
    }

    /// Starts the session (as [`start`](Builder::start)) and returns
    /// ringtrace's own `tracing` subscriber, which records into it: the
    /// fastest way to record `tracing` spans, with no registry (see
    /// [`RingtraceSubscriber`] for what it gives up). Set it as the default,
    /// alone or with filters added by `.with(..)`. The guard is the
    /// session's, as with [`layer`](Builder::layer). Needs the `tracing`
    /// feature (on by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use tracing_subscriber::prelude::*; // for `.with(filter)`
    /// let path = std::env::temp_dir().join("ringtrace-doc-subscriber.pftrace");
    /// let (subscriber, trace) = ringtrace::builder().output(&path).subscriber()?;
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
    ///
    /// # Errors
    ///
    /// As [`Builder::start`].
    pub fn subscriber(self) -> Result<(RingtraceSubscriber, TraceGuard), Error> {
        self.start_recording()
    }

    /// Both finishers: the sampler and the slow rule made of the options,
    /// the session started, then the layer or subscriber made.
    fn start_recording<T: sealed::FromSession>(mut self) -> Result<(T, TraceGuard), Error> {
        #[allow(unused_mut)] // the parent-based decision of `otlp` wraps `decide`
        let mut o = std::mem::take(&mut self.spans);
        let hook = !o.roots.is_empty() || o.decide.is_some();
        crate::session::warn_captures_with_sampling(o.slow.is_some(), o.ratio, hook);
        #[cfg(feature = "otlp")]
        if self.samples_by_parent() {
            o.decide = Some(super::bridge::otel::parent_based(o.decide.take()));
        }
        let hook = !o.roots.is_empty() || o.decide.is_some();
        let sampler = (o.ratio.is_some() || hook)
            .then(|| Arc::new(Sampler::new(o.ratio.unwrap_or(1.0), o.roots, o.decide)));
        super::bridge::set_lifetime_slices(o.lifetime_slices);
        let guard = self.start()?;
        if let Some(sampler) = &sampler {
            super::sample::announce(sampler);
        }
        // In ticks of the clock the session's start calibrated.
        let slow = o.slow.map(|rule| Arc::new(rule.calibrated()));
        let setup = sealed::Setup {
            sampler,
            slow,
            fields_every_slice: o.fields_every_slice,
        };
        Ok((T::from_session(setup), guard))
    }
}
