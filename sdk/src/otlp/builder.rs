//! The OTLP options of `Builder` and the `OTEL_*` variables.

use super::{parse_pairs, Config};
use std::time::Duration;

/// The OTLP options of the session's builder (feature `otlp`).
impl crate::Builder {
    /// Sends the spans of kept requests to an OpenTelemetry collector at
    /// `endpoint` over OTLP/HTTP (protobuf): `POST {endpoint}/v1/traces`,
    /// as `OTEL_EXPORTER_OTLP_ENDPOINT` is read (e.g.
    /// `http://127.0.0.1:4318`). With an [`output`](Self::output) too, the
    /// session writes its file and exports; without one, it only exports.
    /// Spans come from ringtrace's `tracing` [layer](Self::layer) or
    /// [subscriber](Self::subscriber); see `ringtrace::guide::otlp`.
    /// A URL that is not `http://host[:port][/path]` fails the start with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    pub fn otlp(self, endpoint: impl Into<String>) -> Self {
        let url = format!("{}/v1/traces", endpoint.into().trim_end_matches('/'));
        self.otlp_traces_endpoint(url)
    }

    /// As [`otlp`](Self::otlp), with the whole URL the requests go to (no
    /// path appended), as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is read.
    pub fn otlp_traces_endpoint(mut self, url: impl Into<String>) -> Self {
        let url = url.into();
        match &mut self.otlp {
            Some(c) => c.url = url,
            None => self.otlp = Some(Config::new(url)),
        }
        self
    }

    /// A header sent with every OTLP request (an API key...), as
    /// `OTEL_EXPORTER_OTLP_HEADERS` lists them. Only with [`otlp`](Self::otlp).
    pub fn otlp_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Some(c) = &mut self.otlp {
            c.headers.push((name.into(), value.into()));
        }
        self
    }

    /// Compresses OTLP request bodies with gzip (`Content-Encoding: gzip`;
    /// `OTEL_EXPORTER_OTLP_COMPRESSION=gzip`). Off by default.
    pub fn otlp_gzip(mut self, on: bool) -> Self {
        if let Some(c) = &mut self.otlp {
            c.gzip = on;
        }
        self
    }

    /// Batches of at most `spans` spans (default 512,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`), each sent at most `delay` after
    /// its first span was handed over (default 1 s,
    /// `OTEL_BSP_SCHEDULE_DELAY`; the OpenTelemetry SDKs' is 5 s). A batch
    /// is never larger than the queue ([`otlp_queue`](Self::otlp_queue)).
    /// `spans` of 0 is taken as 1.
    pub fn otlp_batch(mut self, spans: usize, delay: Duration) -> Self {
        if let Some(c) = &mut self.otlp {
            c.batch_spans = spans.max(1);
            c.batch_delay = delay;
        }
        self
    }

    /// Spans waiting for the exporter thread at most (default 2,048,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`): while the collector is slow or down,
    /// what does not fit is dropped and counted
    /// ([`Stats::otlp_spans_dropped`](crate::Stats::otlp_spans_dropped)).
    /// `spans` of 0 is taken as 1.
    pub fn otlp_queue(mut self, spans: usize) -> Self {
        if let Some(c) = &mut self.otlp {
            c.queue_spans = spans.max(1);
        }
        self
    }

    /// Whether a root span with a `traceparent` field (a request whose
    /// caller sent its W3C trace context, see `ringtrace::context`) is kept
    /// as the caller decided: kept if its sampled flag is set, not kept if
    /// not, whatever [`sample_ratio`](Self::sample_ratio) says (roots
    /// without one are decided as before). On by default with
    /// [`otlp`](Self::otlp); without it, roots are decided only by this
    /// builder's sampling options.
    pub fn sample_by_parent(mut self, on: bool) -> Self {
        if let Some(c) = &mut self.otlp {
            c.by_parent = on;
        }
        self
    }

    /// Whether roots follow their remote parent's decision.
    pub(crate) fn samples_by_parent(&self) -> bool {
        self.otlp.as_ref().is_some_and(|c| c.by_parent)
    }

    /// The resource's `service.name` (else `OTEL_SERVICE_NAME`, else
    /// `unknown_service:<process name>`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        if let Some(c) = &mut self.otlp {
            c.service_name = Some(name.into());
        }
        self
    }

    /// An attribute of the resource the spans are sent with, as
    /// `OTEL_RESOURCE_ATTRIBUTES` lists them.
    pub fn resource_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Some(c) = &mut self.otlp {
            c.resource.push((key.into(), value.into()));
        }
        self
    }
}

/// Reads the OpenTelemetry variables over `b`'s options:
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the whole URL) or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) turn the export
/// on; then `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_COMPRESSION` (`gzip` or
/// `none`), `OTEL_EXPORTER_OTLP_TIMEOUT` (ms), `OTEL_BSP_MAX_QUEUE_SIZE`,
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_SCHEDULE_DELAY` (ms) and
/// `OTEL_TRACES_SAMPLER` with `OTEL_TRACES_SAMPLER_ARG` apply to it.
pub(crate) fn apply_env(mut b: crate::Builder) -> Result<crate::Builder, crate::Error> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        b = b.otlp_traces_endpoint(url.trim());
    } else if let Some(url) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        b = b.otlp(url.trim());
    }
    let Some(c) = &mut b.otlp else {
        return Ok(b);
    };
    if let Some(h) = var("OTEL_EXPORTER_OTLP_HEADERS") {
        c.headers.extend(parse_pairs(&h));
    }
    if let Some(s) = var("OTEL_SERVICE_NAME") {
        c.service_name.get_or_insert(s);
    }
    if let Some(r) = var("OTEL_RESOURCE_ATTRIBUTES") {
        let mut r = parse_pairs(&r);
        r.extend(std::mem::take(&mut c.resource)); // the builder's win
        c.resource = r;
    }
    if let Some(z) = var("OTEL_EXPORTER_OTLP_COMPRESSION") {
        c.gzip = match z.trim() {
            "gzip" => true,
            "none" => false,
            other => {
                return Err(crate::Error::InvalidConfig(format!(
                    "OTEL_EXPORTER_OTLP_COMPRESSION={other:?}: expected gzip or none"
                )))
            }
        };
    }
    if let Some(t) = var("OTEL_EXPORTER_OTLP_TIMEOUT") {
        let ms: u64 = t.trim().parse().map_err(|_| {
            crate::Error::InvalidConfig(format!(
                "OTEL_EXPORTER_OTLP_TIMEOUT={t:?}: expected milliseconds (a whole number)"
            ))
        })?;
        c.timeout = Duration::from_millis(ms.max(1));
    }
    let count = |k: &str| -> Result<Option<u64>, crate::Error> {
        var(k)
            .map(|v| match v.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(crate::Error::InvalidConfig(format!(
                    "{k}={v:?}: expected a whole number above 0"
                ))),
            })
            .transpose()
    };
    if let Some(n) = count("OTEL_BSP_MAX_QUEUE_SIZE")? {
        c.queue_spans = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")? {
        c.batch_spans = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(ms) = count("OTEL_BSP_SCHEDULE_DELAY")? {
        c.batch_delay = Duration::from_millis(ms);
    }
    // As the variables' specification says: a batch above the queue is
    // the queue's size.
    c.batch_spans = c.batch_spans.min(c.queue_spans);
    if let Some(sampler) = var("OTEL_TRACES_SAMPLER") {
        let (by_parent, ratio) = traces_sampler(sampler.trim(), var("OTEL_TRACES_SAMPLER_ARG"))?;
        c.by_parent = by_parent;
        b.spans.ratio = Some(ratio);
    }
    Ok(b)
}

/// `OTEL_TRACES_SAMPLER` (and its `_ARG`) as ringtrace's whole-request
/// sampling: whether roots with a remote parent follow its decision, and
/// the ratio of the other roots kept.
fn traces_sampler(name: &str, arg: Option<String>) -> Result<(bool, f64), crate::Error> {
    let ratio = || -> Result<f64, crate::Error> {
        let Some(a) = &arg else {
            return Ok(1.0); // the specification's default
        };
        match a.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(crate::Error::InvalidConfig(format!(
                "OTEL_TRACES_SAMPLER_ARG={a:?}: expected a ratio from 0 to 1"
            ))),
        }
    };
    Ok(match name {
        "always_on" => (false, 1.0),
        "always_off" => (false, 0.0),
        "traceidratio" => (false, ratio()?),
        "parentbased_always_on" => (true, 1.0),
        "parentbased_always_off" => (true, 0.0),
        "parentbased_traceidratio" => (true, ratio()?),
        other => {
            return Err(crate::Error::InvalidConfig(format!(
                "OTEL_TRACES_SAMPLER={other:?}: expected always_on, always_off, traceidratio, \
                 parentbased_always_on, parentbased_always_off or parentbased_traceidratio"
            )))
        }
    })
}
