//! W3C Trace Context (feature `otlp`): continue a caller's trace, and hand
//! the current span's on to the services a request calls.
//!
//! A service extracts the caller's `traceparent` and `tracestate` and
//! records them as the `traceparent` and `tracestate` fields of its root
//! span: that span then belongs to the caller's trace, its parent the
//! caller's span, and its sampled flag is the caller's; the `tracestate`
//! goes with every span of that trace in this process (each exported span
//! carries it) and on to the services it calls. An outgoing request
//! carries [`current_headers`] (or [`current_traceparent`] and
//! [`current_tracestate`]).
//!
//! ```
//! # #[cfg(feature = "otlp")] {
//! use tracing::field::display;
//! let headers = [
//!     ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
//!     ("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
//! ];
//! let parent = ringtrace::context::extract(headers.iter().copied());
//! let state = ringtrace::context::extract_tracestate(headers.iter().copied());
//! let span = tracing::info_span!(
//!     "request",
//!     traceparent = parent.as_ref().map(display),
//!     tracestate = state.as_ref().map(display),
//! );
//! # drop(span); }
//! ```
//!
//! Ids are given to spans only while an OTLP exporter runs
//! ([`Builder::otlp`](crate::Builder::otlp)); otherwise
//! [`current_traceparent`] is `None`.

#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

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
    extract_both(headers).map(|(parent, _)| parent)
}

/// The valid `tracestate` among `headers` (names compared without case;
/// several `tracestate` headers are one list, in order), if any: record it
/// as the `tracestate` field of the request's root span, beside its
/// `traceparent`. `None` without a valid `traceparent` (the W3C rule: the
/// state of an unknown parent is not read), without a `tracestate` or
/// with an empty one, and for an invalid one (see [`TraceState::parse`]):
/// the `traceparent` still holds then.
pub fn extract_tracestate<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<TraceState> {
    extract_both(headers).and_then(|(_, state)| state)
}

/// Both headers, read in one pass: the valid `traceparent` and, with it,
/// the valid `tracestate`.
fn extract_both<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<(TraceParent, Option<TraceState>)> {
    let mut found = None;
    let mut states: Vec<&'a str> = Vec::new();
    for (name, value) in headers {
        let name = name.trim();
        if name.eq_ignore_ascii_case("traceparent") {
            if found.is_some() {
                return None; // two traceparents: neither is trusted
            }
            found = Some(TraceParent::parse(value));
        } else if name.eq_ignore_ascii_case("tracestate") {
            states.push(value);
        }
    }
    let parent = found.flatten()?;
    let state = if states.is_empty() {
        None
    } else {
        TraceState::parse_list(states)
    };
    Some((parent, state))
}

/// The `traceparent` header value for a request made inside the current
/// span (of ringtrace's layer or subscriber, through the default
/// dispatcher): its trace id, its own span id as the parent, sampled.
/// `None` outside a span, for a span sampling did not keep, or while no
/// OTLP exporter runs. Its trace's `tracestate`, if it has one, goes with
/// it: [`current_tracestate`], or both at once with [`current_headers`].
pub fn current_traceparent() -> Option<String> {
    crate::tracing::inject_current(true).map(|(ids, _)| ids.traceparent().to_string())
}

/// The `tracestate` header value for a request made inside the current
/// span: its trace's, as the trace's first span in this process received
/// it (its `tracestate` field). `None` where [`current_traceparent`] is,
/// and for a trace that came without one (or started here).
pub fn current_tracestate() -> Option<String> {
    crate::tracing::inject_current(false).and_then(|(_, state)| Some(state?.to_string()))
}

/// The trace context headers for a request made inside the current span:
/// `("traceparent", ...)` as [`current_traceparent`] gives it, then
/// `("tracestate", ...)` if its trace has one. Empty where
/// [`current_traceparent`] is `None`.
///
/// ```no_run
/// # #[cfg(feature = "otlp")] {
/// let mut request = String::from("GET /stock HTTP/1.1\r\nhost: inventory\r\n");
/// for (name, value) in ringtrace::context::current_headers() {
///     request += &format!("{name}: {value}\r\n");
/// }
/// # }
/// ```
pub fn current_headers() -> Vec<(&'static str, String)> {
    let Some((ids, state)) = crate::tracing::inject_current(true) else {
        return Vec::new();
    };
    let mut out = vec![("traceparent", ids.traceparent().to_string())];
    if let Some(state) = state {
        out.push(("tracestate", state.to_string()));
    }
    out
}

/// Most list-members a `tracestate` may have (W3C): one with more is
/// invalid, and dropped whole.
pub const TRACESTATE_MAX_MEMBERS: usize = 32;

/// Characters of a `tracestate` carried on (the W3C recommendation's
/// minimum to propagate): a longer list is cut to fit, its members of more
/// than 128 characters taken out first, then members from its end.
pub const TRACESTATE_MAX_LEN: usize = 512;

/// A valid W3C `tracestate`: vendors' `key=value` list-members, in the
/// order received, as one comma-separated value without optional
/// whitespace or empty members. Cloning it shares the text (it is
/// reference counted): every span of a trace holds the one copy.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceState(Arc<str>);

impl TraceState {
    /// Parses a `tracestate` header value by the W3C rules: list-members
    /// `key=value` separated by commas, optional spaces and tabs around
    /// each, empty members skipped. A key is `lcalpha (lcalpha / digit /
    /// _ - * /)*`, at most 256 characters, or `tenant@system` (a tenant of
    /// at most 241 characters starting with a lowercase letter or a digit,
    /// a system of at most 14 starting with a lowercase letter); a value is
    /// 1 to 256 printable ASCII characters (space included, but not last)
    /// other than `,` and `=`. `None` for an empty list, a malformed member,
    /// more than [`TRACESTATE_MAX_MEMBERS`] members or a key seen twice:
    /// the whole value is invalid then. A list longer than
    /// [`TRACESTATE_MAX_LEN`] characters is cut to fit (members longer
    /// than 128 characters go first, then members from the end).
    pub fn parse(value: &str) -> Option<TraceState> {
        TraceState::parse_list([value])
    }

    /// As [`parse`](Self::parse), for the values of several `tracestate`
    /// headers, one list in order.
    fn parse_list<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<TraceState> {
        let mut members: Vec<(&str, &str)> = Vec::new();
        for value in values {
            for member in value.split(',') {
                let member = member.trim_matches([' ', '\t']);
                if member.is_empty() {
                    continue;
                }
                if members.len() == TRACESTATE_MAX_MEMBERS {
                    return None;
                }
                let (key, val) = member.split_once('=')?;
                if !valid_key(key) || !valid_value(val) {
                    return None;
                }
                if members.iter().any(|(k, _)| *k == key) {
                    return None;
                }
                members.push((key, val));
            }
        }
        let len = |m: &[(&str, &str)]| -> usize {
            m.iter().map(|(k, v)| k.len() + 1 + v.len()).sum::<usize>() + m.len().saturating_sub(1)
        };
        // Cut to the limit: long members first (from the end), then from
        // the end.
        while len(&members) > TRACESTATE_MAX_LEN {
            match members
                .iter()
                .rposition(|(k, v)| k.len() + 1 + v.len() > 128)
            {
                Some(i) => {
                    members.remove(i);
                }
                None => {
                    members.pop();
                }
            }
        }
        if members.is_empty() {
            return None;
        }
        let mut text = String::with_capacity(len(&members));
        for (i, (k, v)) in members.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(k);
            text.push('=');
            text.push_str(v);
        }
        Some(TraceState(text.into()))
    }

    /// The header value: `key=value` members joined by commas.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its list-members, `(key, value)`, in order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.split(',').filter_map(|m| m.split_once('='))
    }

    /// The value of member `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// The header value.
impl fmt::Display for TraceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TraceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TraceState").field(&&*self.0).finish()
    }
}

/// `simple-key` or `tenant-id "@" system-id` of the W3C grammar.
fn valid_key(key: &str) -> bool {
    let rest = |s: &[u8]| {
        s.iter()
            .all(|&c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'))
    };
    let b = key.as_bytes();
    match key.split_once('@') {
        None => (1..=256).contains(&b.len()) && b[0].is_ascii_lowercase() && rest(&b[1..]),
        Some((tenant, system)) => {
            let (t, s) = (tenant.as_bytes(), system.as_bytes());
            (1..=241).contains(&t.len())
                && matches!(t[0], b'a'..=b'z' | b'0'..=b'9')
                && rest(&t[1..])
                && (1..=14).contains(&s.len())
                && s[0].is_ascii_lowercase()
                && rest(&s[1..])
        }
    }
}

/// `0*255(chr) nblk-chr`: printable ASCII but `,` and `=`, not ending in a
/// space.
fn valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    (1..=256).contains(&b.len())
        && b[b.len() - 1] != b' '
        && b.iter()
            .all(|&c| matches!(c, 0x20..=0x7e) && c != b',' && c != b'=')
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

    #[test]
    fn tracestate_parses_by_the_w3c_rules() {
        let ts =
            TraceState::parse(" congo=t61rcWkgMzE ,\t, rojo=00f067aa0ba902b7,fw529a3039@dt=a b ")
                .unwrap();
        assert_eq!(
            ts.as_str(),
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,fw529a3039@dt=a b"
        );
        assert_eq!(ts.get("rojo"), Some("00f067aa0ba902b7"));
        assert_eq!(ts.entries().count(), 3);
        let ok_32: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            TraceState::parse(&ok_32.join(","))
                .unwrap()
                .entries()
                .count(),
            32
        );
        let key_256 = format!("a{}", "b".repeat(255));
        assert!(TraceState::parse(&format!("{key_256}=1")).is_some());
        let value_256 = "v".repeat(256);
        assert!(TraceState::parse(&format!("a={value_256}")).is_some());
        let too_many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        for bad in [
            "",
            " , ",
            "Upper=1",
            "1abc=1",
            "a b=1",
            "a=",
            "a=1=2",
            "a=\u{e9}",
            "a=1\tb",
            "=1",
            "a",
            "a=1,a=2",
            "t@=1",
            "@s=1",
            "t@S=1",
            "t@0s=1",
            "t@s@x=1",
            "t@abcdefghijklmno=1",
            &format!("{key_256}b=1"),
            &format!("a={value_256}v"),
            &too_many.join(","),
        ] {
            assert_eq!(TraceState::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_long_tracestate_is_cut_as_the_w3c_recommends() {
        // 6 members of 100 characters and one of 200: over 512.
        let mut members: Vec<String> = (0..6).map(|i| format!("k{i}={}", "x".repeat(97))).collect();
        members.insert(2, format!("big={}", "y".repeat(196)));
        let ts = TraceState::parse(&members.join(",")).unwrap();
        assert!(ts.as_str().len() <= TRACESTATE_MAX_LEN);
        let keys: Vec<&str> = ts.entries().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            ["k0", "k1", "k2", "k3", "k4"],
            "the big one first, then the last"
        );
    }

    #[test]
    fn tracestate_is_read_only_beside_a_valid_traceparent() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let both = [
            ("TraceState", "a=1"),
            ("traceparent", good),
            ("tracestate", "b=2"),
        ];
        let ts = extract_tracestate(both.iter().copied()).unwrap();
        assert_eq!(ts.as_str(), "a=1,b=2", "two headers are one list");
        let dup = [
            ("traceparent", good),
            ("tracestate", "a=1"),
            ("tracestate", "a=2"),
        ];
        assert_eq!(extract_tracestate(dup.iter().copied()), None);
        assert!(
            extract(dup.iter().copied()).is_some(),
            "the traceparent holds"
        );
        let bad_parent = [("traceparent", "00-zz"), ("tracestate", "a=1")];
        assert_eq!(extract_tracestate(bad_parent.iter().copied()), None);
        assert_eq!(extract_tracestate([("tracestate", "a=1")]), None);
    }
}
