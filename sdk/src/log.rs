//! `log` → ringtrace (feature `log`): records of the [`log`] crate
//! become log instants, exactly as [`trace_log!`](crate::trace_log) writes
//! them: in Perfetto an INSTANT with a `LogMessage` (body, source location,
//! priority), in Chrome JSON an `i` event named `log` with args `message`,
//! `level` and `source`. The category is the record's target (by default
//! the module path), so [`enable_categories`](crate::enable_categories) and
//! `RINGTRACE_CATEGORIES` filter `log` records as they filter everything
//! else.
//!
//! One line installs it: [`init()`] (ringtrace alone, every level), or a
//! [`Logger`] built with a level filter and, optionally, the logger the
//! program already has, which keeps receiving every record it wants:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start()?;
//! ringtrace::log::Logger::new()
//!     .max_level(log::LevelFilter::Info)
//!     .init()?;
//! log::info!("connected to {}", "db-1"); // a log instant, category = module path
//! log::debug!("not recorded: below the level filter, not even formatted");
//! # Ok(())
//! # }
//! ```
//!
//! Costs: a record below the level filter is dropped by `log`'s macros
//! before the logger is called (`log::max_level`, set by [`Logger::init`]);
//! one at or above it costs a level compare, a lookup of its call site in a
//! per-thread cache (by target, file and line; the first record of a site
//! registers it, under a lock, once per process), the category's enabled
//! byte, then the formatting of the message into a reused per-thread buffer
//! and one ring write. A message without arguments is not formatted at all.
//! No lock, allocation or system call after a site's first record on a
//! thread.
//!
//! Records logged from thread-local destructors are recorded too while the
//! thread's ring is still installed; the per-thread buffers are then
//! replaced by local ones. After the ring's owner is gone, the registry
//! counts them as lost (`Stats::events_lost`).

#![forbid(unsafe_code)]

use crate::events::LogLevel;
use crate::record::callsite::Callsite;
use ::log::{Level, LevelFilter, Log, Metadata, Record, SetLoggerError};
use once_cell::sync::Lazy;
use parking_lot::RwLock;
use std::cell::Cell;
use std::collections::HashMap;

/// Installs a [`Logger`] that records every level into ringtrace, as the
/// process's `log` logger, and sets `log`'s global maximum level to
/// `Trace`. Fails if a logger is already installed.
///
/// Records are written while a session records (see
/// [`builder`](crate::builder)); between sessions they cost a level compare,
/// a site lookup and one relaxed load.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::log::init().expect("no other logger installed");
/// log::warn!("disk {} is {}% full", "sda", 93);
/// ```
pub fn init() -> Result<(), SetLoggerError> {
    Logger::new().init()
}

/// A `log::Log` that records into ringtrace, optionally passing every
/// record on to another logger as well.
///
/// # Examples
///
/// Keep the program's own logger (here a minimal one writing to stderr):
///
/// ```
/// use log::{LevelFilter, Log, Metadata, Record};
///
/// struct Stderr;
/// impl Log for Stderr {
///     fn enabled(&self, m: &Metadata<'_>) -> bool { m.level() <= log::Level::Warn }
///     fn log(&self, r: &Record<'_>) {
///         if self.enabled(r.metadata()) { eprintln!("{}: {}", r.level(), r.args()); }
///     }
///     fn flush(&self) {}
/// }
///
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::log::Logger::new()
///     .max_level(LevelFilter::Debug)        // what ringtrace records
///     .chain(Stderr, LevelFilter::Warn)     // what the other logger wants
///     .init()
///     .unwrap();
/// log::debug!("in the trace only");
/// log::warn!("in the trace and on stderr");
/// ```
pub struct Logger {
    max: LevelFilter,
    inner: Option<(Box<dyn Log>, LevelFilter)>,
}

impl Default for Logger {
    fn default() -> Self {
        Logger::new()
    }
}

impl std::fmt::Debug for Logger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logger")
            .field("max_level", &self.max)
            .field("chained", &self.inner.as_ref().map(|(_, level)| level))
            .finish()
    }
}

impl Logger {
    /// A logger that records every level and passes records on to no one.
    pub fn new() -> Logger {
        Logger {
            max: LevelFilter::Trace,
            inner: None,
        }
    }

    /// Records only records at `level` or more severe (default: `Trace`,
    /// everything). `LevelFilter::Off` records nothing.
    pub fn max_level(mut self, level: LevelFilter) -> Logger {
        self.max = level;
        self
    }

    /// Also passes records to `inner` (the program's existing logger), which
    /// wants records up to `inner_level`: its own `enabled` and `log` decide
    /// the rest. `log`'s global maximum level becomes the larger of the two.
    pub fn chain(mut self, inner: impl Log + 'static, inner_level: LevelFilter) -> Logger {
        self.inner = Some((Box::new(inner), inner_level));
        self
    }

    /// The level `log`'s macros must let through for this logger: the larger
    /// of ringtrace's and the chained logger's.
    pub fn global_max_level(&self) -> LevelFilter {
        match &self.inner {
            Some((_, level)) => self.max.max(*level),
            None => self.max,
        }
    }

    /// Installs this logger as the process's `log` logger and sets
    /// `log::set_max_level` to [`global_max_level`](Logger::global_max_level),
    /// so `log`'s macros drop every other record before any work. Fails if a
    /// logger is already installed (use [`chain`](Logger::chain) to keep it).
    pub fn init(self) -> Result<(), SetLoggerError> {
        let level = self.global_max_level();
        ::log::set_boxed_logger(Box::new(self))?;
        ::log::set_max_level(level);
        Ok(())
    }

    /// True if ringtrace records a record with this metadata (level, then
    /// the target's category and the session), without its call site.
    fn records(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.max
            && crate::record::registry::REGISTRY.session() != 0
            && target_enabled(metadata.target())
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.records(metadata)
            || self
                .inner
                .as_ref()
                .is_some_and(|(inner, _)| inner.enabled(metadata))
    }

    fn log(&self, record: &Record<'_>) {
        if record.level() <= self.max {
            record_log(record);
        }
        if let Some((inner, _)) = &self.inner {
            inner.log(record);
        }
    }

    fn flush(&self) {
        if let Some((inner, _)) = &self.inner {
            inner.flush();
        }
    }
}

/// Writes one record as a log instant (when its category records).
fn record_log(record: &Record<'_>) {
    let site = site_of(record);
    if site.is_enabled() {
        crate::events::log(site, level_of(record.level()), *record.args());
    }
}

/// `log`'s levels as Perfetto's log priorities (`Trace` is `VERBOSE`).
fn level_of(level: Level) -> LogLevel {
    match level {
        Level::Error => LogLevel::Error,
        Level::Warn => LogLevel::Warn,
        Level::Info => LogLevel::Info,
        Level::Debug => LogLevel::Debug,
        Level::Trace => LogLevel::Verbose,
    }
}

// ---------------------------------------------------------------------------
// Call sites: one per (target, file, line)

/// Distinct call sites registered before records share [`OVERFLOW`]: a
/// bound on what programs that build targets at run time can leak.
const MAX_SITES: usize = 1 << 16;

/// Where the records of sites past [`MAX_SITES`] go (their target and source
/// location are lost; their message and level are kept).
static OVERFLOW: Callsite = Callsite::new("log", "log", "", 0, "", &[]);

type SiteKey = (String, String, u32);

/// Every site, by content. Written on a site's first record in the process.
static SITES: Lazy<RwLock<HashMap<SiteKey, &'static Callsite>>> =
    Lazy::new(|| RwLock::new(HashMap::new()));

/// Entries of a thread's site cache (a power of two).
const CACHE_LEN: usize = 256;

thread_local! {
    /// Direct-mapped by the addresses of target and file and the line; an
    /// entry is used only when the site's target, file and line are equal
    /// to the record's, so a reused address never gives a wrong site.
    static CACHE: [Cell<Option<&'static Callsite>>; CACHE_LEN] =
        const { [const { Cell::new(None) }; CACHE_LEN] };
}

/// Entries of a thread's cache of target answers (a power of two).
const TARGETS_LEN: usize = 32;

/// A thread's target answers (see [`TARGETS`]).
type Answers = [(String, u64, bool); TARGETS_LEN];

thread_local! {
    /// `enabled()` answers by target, direct-mapped by the target's address,
    /// each stamped with the filter generation it was computed under and
    /// used only for an equal target: `log_enabled!` and chained loggers ask
    /// often, and the filter itself is behind the registry's lock. On the
    /// heap, made at a thread's first `enabled()`: static TLS is taken in
    /// every thread of the process, logging or not.
    static TARGETS: std::cell::RefCell<Option<Box<Answers>>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether the category filter records `target` (see [`TARGETS`]).
fn target_enabled(target: &str) -> bool {
    let generation = crate::record::callsite::filter_generation();
    let i = ((target.as_ptr() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 59) as usize
        & (TARGETS_LEN - 1);
    let ask = || crate::category_enabled(target);
    TARGETS
        .try_with(|t| {
            let Ok(mut t) = t.try_borrow_mut() else {
                return ask();
            };
            let t = t.get_or_insert_with(|| {
                Box::new(std::array::from_fn(|_| (String::new(), u64::MAX, false)))
            });
            let e = &mut t[i];
            if e.1 != generation || e.0 != target {
                // The generation is read before asking: a change meanwhile
                // leaves a stale stamp, so the next call asks again.
                *e = (target.to_owned(), generation, ask());
            }
            e.2
        })
        .unwrap_or_else(|_| ask())
}

fn slot(target: &str, file: &str, line: u32) -> usize {
    let h = (target.as_ptr() as u64 ^ (file.as_ptr() as u64).rotate_left(17) ^ line as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 56) as usize & (CACHE_LEN - 1)
}

fn same(site: &Callsite, target: &str, file: &str, line: u32) -> bool {
    site.line == line && site.file == file && site.category == target
}

fn site_of(record: &Record<'_>) -> &'static Callsite {
    let target = record.target();
    let file = record.file().unwrap_or("");
    let line = record.line().unwrap_or(0);
    let i = slot(target, file, line);
    let cached = CACHE
        .try_with(|c| c[i].get())
        .ok()
        .flatten()
        .filter(|s| same(s, target, file, line));
    if let Some(site) = cached {
        return site;
    }
    let site = site_slow(record, target, file, line);
    // Fails only in thread-local destructors: the next record looks again.
    let _ = CACHE.try_with(|c| c[i].set(Some(site)));
    site
}

#[cold]
#[inline(never)]
fn site_slow(record: &Record<'_>, target: &str, file: &str, line: u32) -> &'static Callsite {
    let key = (target.to_owned(), file.to_owned(), line);
    if let Some(&site) = SITES.read().get(&key) {
        return site;
    }
    let mut sites = SITES.write();
    if let Some(&site) = sites.get(&key) {
        return site;
    }
    if sites.len() >= MAX_SITES {
        return &OVERFLOW;
    }
    // Static strings are used as they are; others are kept for the life of
    // the process, as the sites of the macros are.
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let file = record.file_static().unwrap_or_else(|| leak(file));
    let module = record
        .module_path_static()
        .unwrap_or_else(|| leak(record.module_path().unwrap_or("")));
    let site: &'static Callsite = Box::leak(Box::new(Callsite::new(
        leak(target),
        "log",
        file,
        line,
        module,
        &[],
    )));
    sites.insert(key, site);
    site
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_at<'a>(target: &'a str, file: &'a str, line: u32) -> Record<'a> {
        Record::builder()
            .target(target)
            .file(Some(file))
            .line(Some(line))
            .level(Level::Info)
            .build()
    }

    #[test]
    fn one_site_per_target_file_and_line() {
        let a = site_of(&record_at("unit::a", "src/a.rs", 10));
        let b = site_of(&record_at("unit::a", "src/a.rs", 11));
        let c = site_of(&record_at("unit::b", "src/a.rs", 10));
        assert!(!std::ptr::eq(a, b) && !std::ptr::eq(a, c) && !std::ptr::eq(b, c));
        // Equal content from other allocations: the same site.
        let (t, f) = (String::from("unit::a"), String::from("src/a.rs"));
        assert!(std::ptr::eq(site_of(&record_at(&t, &f, 10)), a));
        assert_eq!(
            (a.category, a.file, a.line, a.name),
            ("unit::a", "src/a.rs", 10, "log")
        );
    }

    #[test]
    fn a_reused_address_never_gives_the_wrong_site() {
        // Same buffer, other content: the cache entry of the first record
        // must not answer for the second.
        let mut target = String::from("unit::x1");
        let first = site_of(&record_at(&target, "f.rs", 1));
        target.replace_range(7.., "2");
        let second = site_of(&record_at(&target, "f.rs", 1));
        assert_eq!(first.category, "unit::x1");
        assert_eq!(second.category, "unit::x2");
    }

    #[test]
    fn levels_map_to_log_priorities() {
        assert_eq!(level_of(Level::Trace), LogLevel::Verbose);
        assert_eq!(level_of(Level::Debug), LogLevel::Debug);
        assert_eq!(level_of(Level::Info), LogLevel::Info);
        assert_eq!(level_of(Level::Warn), LogLevel::Warn);
        assert_eq!(level_of(Level::Error), LogLevel::Error);
    }

    #[test]
    fn global_level_is_the_larger_of_both() {
        struct Nop;
        impl Log for Nop {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn log(&self, _: &Record<'_>) {}
            fn flush(&self) {}
        }
        let l = Logger::new().max_level(LevelFilter::Warn);
        assert_eq!(l.global_max_level(), LevelFilter::Warn);
        let l = l.chain(Nop, LevelFilter::Debug);
        assert_eq!(l.global_max_level(), LevelFilter::Debug);
        let l = Logger::new()
            .max_level(LevelFilter::Info)
            .chain(Nop, LevelFilter::Error);
        assert_eq!(l.global_max_level(), LevelFilter::Info);
    }
}
