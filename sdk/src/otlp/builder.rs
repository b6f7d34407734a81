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
/// `none`) and `OTEL_EXPORTER_OTLP_TIMEOUT` (ms) apply to it.
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
    Ok(b)
}
