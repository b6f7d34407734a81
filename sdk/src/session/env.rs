//! The options environment variables set (`init_from_env`'s table),
//! applied over a builder: [`Builder::from_env`], which `init_from_env`
//! starts a session with, and which a `tracing` layer or subscriber is
//! finished from.
//!
//! Every value is checked, and a bad one is an [`Error::InvalidConfig`]
//! naming the variable and what it allows, never ignored: the messages of
//! each kind of value (text, number, boolean, ratio, patterns, keyword)
//! are made in one helper each, below.

use super::builder::Builder;
use super::error::Error;
use crate::record::callsite::CategoryFilter;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The smallest part [`Builder::max_file_bytes`] keeps (it raises smaller
/// values to this): `RINGTRACE_MAX_FILE_BYTES` below it is an error
/// (checked against the builder by a test below).
const MIN_FILE_BYTES: u64 = 64 << 10;
/// The largest ring [`Builder::start`] accepts (1 TiB).
const MAX_RING_BYTES: u64 = 1 << 40;
/// The longest part of a bad value an error message repeats.
const SHOWN_CHARS: usize = 64;

/// The words a boolean variable accepts (trimmed, any case).
const TRUE_WORDS: [&str; 4] = ["1", "true", "yes", "on"];
const FALSE_WORDS: [&str; 4] = ["0", "false", "no", "off"];

impl Builder {
    /// Applies the environment's configuration over this builder's (the
    /// variables of [`init_from_env`](crate::init_from_env)'s table, each
    /// set one replacing the builder's option), for any finisher:
    /// [`start`](Builder::start), or with the `tracing` feature
    /// [`layer`](Builder::layer) and [`subscriber`](Builder::subscriber),
    /// for which it also reads `RINGTRACE_SAMPLE` (a ratio from 0 to 1 for
    /// [`sample_ratio`](Builder::sample_ratio), such as `0.01`) and
    /// `RINGTRACE_SAMPLE_ROOTS` (comma-separated patterns for
    /// [`sample_roots`](Builder::sample_roots): `name`, `prefix*` or `*`;
    /// empty: none, as unset) and `RINGTRACE_SPAN_SLICES` (`entered` or
    /// `lifetime`, for [`span_slices`](Builder::span_slices)). Returns `None` if `RINGTRACE_OUTPUT` is
    /// unset or empty: record nothing (no other variable is read).
    /// [`init_from_env`](crate::init_from_env) is
    /// `builder().from_env()?.map(Builder::start)`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the variable and what it allows if a
    /// value is bad (as [`init_from_env`](crate::init_from_env) lists
    /// them), also if `RINGTRACE_SAMPLE` is not a number (NaN included) or
    /// is outside 0 to 1, or a pattern of `RINGTRACE_SAMPLE_ROOTS` is
    /// malformed (`*` other than at the end, or a `-pattern`: roots are
    /// only listed).
    ///
    /// # Examples
    ///
    /// ```
    /// // RINGTRACE_OUTPUT=trace.pftrace RINGTRACE_SAMPLE=0.01 ./service
    /// let configured = ringtrace::builder().process_name("service").from_env()?;
    /// if let Some((subscriber, _trace)) = configured.map(|b| b.subscriber()).transpose()? {
    ///     tracing::subscriber::set_global_default(subscriber).ok();
    /// }
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn from_env(self) -> Result<Option<Builder>, Error> {
        // With the `otlp` feature, an OTLP endpoint variable alone starts
        // a session that only exports (`otlp::apply_env`).
        #[cfg(feature = "otlp")]
        let this = crate::otlp::apply_env(self)?;
        #[cfg(feature = "otlp")]
        let exports = this.otlp.is_some();
        #[cfg(not(feature = "otlp"))]
        let (this, exports) = (self, false);
        let b = match env_config(this, exports)? {
            Some(b) => b,
            None => return Ok(None),
        };
        #[cfg(feature = "tracing")]
        let b = {
            let mut b = b;
            let (ratio, roots) = env_sampling()?;
            b.spans.apply_env(ratio, roots);
            if let Some(slices) = keyword("RINGTRACE_SPAN_SLICES", &["entered", "lifetime"])? {
                b.spans.lifetime_slices = slices == "lifetime";
            }
            b
        };
        Ok(Some(b))
    }
}

/// `b` with the environment's configuration (`init_from_env`'s table but
/// the `tracing` variables) applied over it; `None` if `RINGTRACE_OUTPUT`
/// is unset or empty (then no other variable is read).
fn env_config(b: Builder, exports: bool) -> Result<Option<Builder>, Error> {
    // A path: any bytes are a valid file name, so no UTF-8 check.
    let Some(out) = std::env::var_os("RINGTRACE_OUTPUT").filter(|v| !v.is_empty()) else {
        return Ok(exports.then_some(b));
    };
    let system = out == "system" || boolean("RINGTRACE_SYSTEM")?.unwrap_or(false);
    let mut b = b.system_tracing(system);
    if out != "system" {
        b = b.output(PathBuf::from(out));
    }
    if system {
        // Perfetto's variable, read when system tracing connects: the
        // address is text (a path, `@abstract`, `host:port`, `vsock://`).
        text("PERFETTO_PRODUCER_SOCK_NAME")?;
    }
    if let Some(rules) = patterns("RINGTRACE_CATEGORIES", true)? {
        let mut filter = CategoryFilter::none();
        for (pattern, enable) in rules {
            filter.push(&pattern, enable);
        }
        b.filter = filter;
    }
    if let Some(n) = number(
        "RINGTRACE_BUFFER_BYTES",
        super::MIN_BUDGET_BYTES,
        u64::MAX,
        "bytes of memory for the rings of all threads",
    )? {
        b = b.buffer_bytes(n);
    }
    let ring_max = MAX_RING_BYTES.min(usize::MAX as u64);
    if let Some(n) = number(
        "RINGTRACE_BUFFER_BYTES_PER_THREAD",
        0,
        ring_max,
        "bytes of the largest ring of one thread, 1 TiB at most, rounded up to a power of two \
         of at least 512",
    )? {
        // In range of usize: at most `ring_max`.
        b = b.buffer_bytes_per_thread(n as usize);
    }
    if let Some(hz) = number(
        "RINGTRACE_CPU_SAMPLING",
        0,
        u32::MAX.into(),
        "CPU stack samples per second of each thread, 0: off",
    )? {
        // In range of u32: at most `u32::MAX`.
        b = b.cpu_sampling(hz as u32);
    }
    if let Some(on) = boolean("RINGTRACE_OVERWRITE")? {
        b = b.overwrite(on);
    }
    if let Some(n) = number(
        "RINGTRACE_MAX_FILE_BYTES",
        MIN_FILE_BYTES,
        u64::MAX,
        "bytes of each part of the file on disk",
    )? {
        b = b.max_file_bytes(n);
    }
    if let Some(n) = number(
        "RINGTRACE_MAX_FILES",
        1,
        u64::MAX,
        "parts kept on disk; 1: one file, a hard limit, events past \
         RINGTRACE_MAX_FILE_BYTES dropped and counted",
    )? {
        b = b.max_files(n);
    }
    // Read by every session's start (`Calibration::start`); checked here
    // so that a mistyped clock is an error, not the default silently.
    keyword("RINGTRACE_CLOCK", &["boottime"])?;
    Ok(Some(b))
}

/// `RINGTRACE_SAMPLE` (a ratio) and `RINGTRACE_SAMPLE_ROOTS` (patterns;
/// set and empty: none, as unset), for a `tracing` layer or subscriber.
#[cfg(feature = "tracing")]
fn env_sampling() -> Result<(Option<f64>, Option<Vec<String>>), Error> {
    let ratio = ratio("RINGTRACE_SAMPLE")?;
    let roots = patterns("RINGTRACE_SAMPLE_ROOTS", false)?
        .map(|rules| rules.into_iter().map(|(p, _)| p).collect());
    Ok((ratio, roots))
}

/// A bad value's text as an error message repeats it: control characters
/// escaped, cut after [`SHOWN_CHARS`] characters.
fn shown(v: &str) -> String {
    let mut s = String::new();
    for c in v.chars().take(SHOWN_CHARS) {
        if c.is_control() {
            s.extend(c.escape_debug());
        } else {
            s.push(c);
        }
    }
    if v.chars().nth(SHOWN_CHARS).is_some() {
        s.push_str(&format!("... ({} bytes)", v.len()));
    }
    s
}

/// `name`'s value, if set (empty included); an error if it is not UTF-8.
fn utf8(name: &str) -> Result<Option<String>, Error> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) => v.into_string().map(Some).map_err(|raw| {
            let bytes = OsStr::as_bytes(&raw);
            let head = &bytes[..bytes.len().min(SHOWN_CHARS)];
            Error::InvalidConfig(format!(
                "{name} is not valid UTF-8 (its bytes: {}): the value must be text",
                head.escape_ascii()
            ))
        }),
    }
}

/// `name`'s value, trimmed; `None` if unset, empty or only spaces (all
/// variables but the lists treat an empty value as unset).
fn text(name: &str) -> Result<Option<String>, Error> {
    Ok(utf8(name)?
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty()))
}

/// A whole number from `min` to `max`, `what` saying what it counts.
fn number(name: &str, min: u64, max: u64, what: &str) -> Result<Option<u64>, Error> {
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    // Parsed wider than u64, so that a negative number or one past u64
    // is said to be out of range, not "not a number".
    use std::num::IntErrorKind;
    let n: i128 = match v.parse::<i128>() {
        Ok(n) => n,
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => i128::MAX,
        Err(e) if *e.kind() == IntErrorKind::NegOverflow => i128::MIN,
        Err(_) => {
            return Err(Error::InvalidConfig(format!(
                "{name}={} is not a number (expected a whole number from {min} to {max}: {what})",
                shown(&v)
            )))
        }
    };
    if n > i128::from(max) {
        return Err(Error::InvalidConfig(format!(
            "{name}={} is out of range: at most {max} ({what})",
            shown(&v)
        )));
    }
    if n < i128::from(min) {
        return Err(Error::InvalidConfig(format!(
            "{name}={} is out of range: at least {min} ({what})",
            shown(&v)
        )));
    }
    // From `min` to `max`: in range of u64.
    Ok(Some(n as u64))
}

/// `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (trimmed, any case).
fn boolean(name: &str) -> Result<Option<bool>, Error> {
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    let is = |words: &[&str]| words.iter().any(|w| v.eq_ignore_ascii_case(w));
    if is(&TRUE_WORDS) {
        Ok(Some(true))
    } else if is(&FALSE_WORDS) {
        Ok(Some(false))
    } else {
        Err(Error::InvalidConfig(format!(
            "{name}={} is not a boolean (expected {} to turn it on, or {} to turn it off; \
             any case)",
            shown(&v),
            TRUE_WORDS.join(", "),
            FALSE_WORDS.join(", ")
        )))
    }
}

/// A ratio from 0 to 1 (a decimal number).
#[cfg(feature = "tracing")]
fn ratio(name: &str) -> Result<Option<f64>, Error> {
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    let r = match v.parse::<f64>() {
        Ok(r) if !r.is_nan() => r,
        _ => {
            return Err(Error::InvalidConfig(format!(
                "{name}={} is not a number (expected a ratio from 0 to 1, such as 0.01)",
                shown(&v)
            )))
        }
    };
    let bound = if r > 1.0 {
        "at most 1"
    } else if r < 0.0 {
        "at least 0"
    } else {
        return Ok(Some(r));
    };
    Err(Error::InvalidConfig(format!(
        "{name}={} is out of range: {bound} (a ratio from 0 to 1)",
        shown(&v)
    )))
}

/// Comma-separated patterns (`name` or `prefix*`; with `negate`, `-pattern`
/// turns one off), as (pattern, on) in order. Set and empty: an empty list.
fn patterns(name: &str, negate: bool) -> Result<Option<Vec<(String, bool)>>, Error> {
    let Some(v) = utf8(name)? else {
        return Ok(None);
    };
    let mut rules = Vec::new();
    for item in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (pattern, on) = match item.strip_prefix('-') {
            Some(off) if negate => (off, false),
            _ => (item, true),
        };
        let why = if pattern.is_empty() {
            Some("it names nothing")
        } else if item.starts_with('-') && !negate {
            Some("a pattern here cannot turn anything off")
        } else if pattern.find('*').is_some_and(|at| at + 1 != pattern.len()) {
            Some("`*` goes only at the end")
        } else {
            None
        };
        if let Some(why) = why {
            let form = if negate {
                "`name`, `prefix*` or `*`, `-` before one to turn it off"
            } else {
                "`name`, `prefix*` or `*`"
            };
            return Err(Error::InvalidConfig(format!(
                "{name}: the pattern {} is malformed: {why} (expected comma-separated patterns: \
                 {form})",
                shown(item)
            )));
        }
        rules.push((pattern.to_owned(), on));
    }
    Ok(Some(rules))
}

/// One of `allowed` (trimmed, any case), returned in lower case.
fn keyword(name: &str, allowed: &[&str]) -> Result<Option<String>, Error> {
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    match allowed.iter().find(|a| v.eq_ignore_ascii_case(a)) {
        Some(a) => Ok(Some((*a).to_owned())),
        None => Err(Error::InvalidConfig(format!(
            "{name}={} is not a value it takes (expected {}, or unset)",
            shown(&v),
            allowed.join(" or ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_part_is_the_builders() {
        let b = super::super::builder().max_file_bytes(0);
        assert_eq!(b.max_file_bytes, Some(MIN_FILE_BYTES));
        let b = super::super::builder().max_file_bytes(MIN_FILE_BYTES + 1);
        assert_eq!(b.max_file_bytes, Some(MIN_FILE_BYTES + 1));
    }

    #[test]
    fn shown_values_are_escaped_and_cut() {
        assert_eq!(shown("a\tb"), "a\\tb");
        let long = "x".repeat(100);
        assert_eq!(shown(&long), format!("{}... (100 bytes)", "x".repeat(64)));
    }
}
