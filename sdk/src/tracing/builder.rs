//! `layer()` and `subscriber()`: one builder for both ways in from `tracing`,
//! taking every option of a session's [`Builder`].

use super::sealed;
use super::{RingtraceLayer, RingtraceSubscriber};
use crate::session::{Builder, Error, Format, TraceGuard};
use std::fmt;
use std::io::Write;
use std::marker::PhantomData;
use std::path::Path;
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
