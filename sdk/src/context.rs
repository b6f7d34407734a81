//! W3C Trace Context (feature `otlp`): continue a caller's trace, and hand
//! the current span's on to the services a request calls.
//!
//! A service extracts the caller's `traceparent` and records it as the
//! `traceparent` field of its root span: that span then belongs to the
//! caller's trace, its parent the caller's span, and its sampled flag is
//! the caller's. An outgoing request carries [`current_traceparent`].
//!
//! ```
//! # #[cfg(feature = "otlp")] {
//! let headers = [("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")];
//! let parent = ringtrace::context::extract(headers.iter().copied());
//! let span = tracing::info_span!("request", traceparent = parent.as_ref().map(tracing::field::display));
//! # drop(span); }
//! ```
//!
//! Ids are given to spans only while an OTLP exporter runs
//! ([`Builder::otlp`](crate::Builder::otlp)); otherwise
//! [`current_traceparent`] is `None`.

#![forbid(unsafe_code)]

use std::fmt;

/// A W3C `traceparent`: version 00's trace id, parent id and flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// 16 bytes, not all zero.
    pub trace_id: [u8; 16],
    /// The caller's span id, 8 bytes, not all zero.
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` header value by the W3C rules: `None` for a
    /// version `ff`, uppercase or non-hex digits, wrong lengths, an
    /// all-zero trace or parent id, or a version 00 value with more after
    /// its flags (a later version may carry more fields: the first four
    /// are read).
    pub fn parse(value: &str) -> Option<TraceParent> {
        let v = value.trim().as_bytes();
        if v.len() < 55 {
            return None;
        }
        let version = hex_bytes::<1>(&v[0..2])?[0];
        if version == 0xff || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
            return None;
        }
        if (version == 0 && v.len() != 55) || (version != 0 && v.len() > 55 && v[55] != b'-') {
            return None;
        }
        let trace_id = hex_bytes::<16>(&v[3..35])?;
        let parent_id = hex_bytes::<8>(&v[36..52])?;
        let flags = hex_bytes::<1>(&v[53..55])?[0];
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the caller kept (sampled) the request.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// The header value: `00-<trace id>-<parent id>-<flags>`, lowercase hex.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.parent_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

/// Lowercase hex only (the W3C rule), exactly `N` bytes.
fn hex_bytes<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The valid `traceparent` among `headers` (names compared without case),
/// if any: record it as the `traceparent` field of the request's root span.
pub fn extract<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<TraceParent> {
    let mut found = None;
    for (name, value) in headers {
        if name.trim().eq_ignore_ascii_case("traceparent") {
            if found.is_some() {
                return None; // two traceparents: neither is trusted
            }
            found = Some(TraceParent::parse(value));
        }
    }
    found.flatten()
}

/// The `traceparent` header value for a request made inside the current
/// span (of ringtrace's layer or subscriber, through the default
/// dispatcher): its trace id, its own span id as the parent, sampled.
/// `None` outside a span, for a span sampling did not keep, or while no
/// OTLP exporter runs.
pub fn current_traceparent() -> Option<String> {
    crate::tracing::inject_current().map(|ids| ids.traceparent().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_parses_by_the_w3c_rules() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let tp = TraceParent::parse(good).unwrap();
        assert!(tp.sampled());
        assert_eq!(tp.to_string(), good);
        assert_eq!(tp.parent_id, [0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        for bad in [
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "",
            "é",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes";
        assert!(!TraceParent::parse(later).unwrap().sampled());
        let headers = [("Content-Type", "x"), ("TraceParent", good)];
        assert_eq!(extract(headers.iter().copied()), Some(tp));
    }
}
