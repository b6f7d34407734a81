//! Call sites and the category filter.
//!
//! Every macro invocation owns one `static Callsite`: its name, category,
//! source location and argument names, plus a cached *interest* byte. The hot
//! path reads that byte with one relaxed load: `ENABLED` records, anything
//! else branches to a `#[cold]` function that registers the site (first use)
//! and answers. Registration gives the site a dense id, which is what records
//! carry and what encoders intern per sequence.
//!
//! Changing the category filter, system tracing's wants, or starting or
//! stopping a session re-computes the interest of every registered site
//! under the registry lock; recording threads never take that lock after a
//! site's first use. Nothing else runs on a change: what `tracing` caches
//! per call site stays true across changes (see the subscriber's
//! `register_callsite`).

use once_cell::sync::Lazy;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Mutex;

const UNREGISTERED: u8 = 0;
const DISABLED: u8 = 1;
const ENABLED: u8 = 2;

/// The static description of one instrumentation point. Created by the macros;
/// not meant to be built by hand.
#[doc(hidden)]
pub struct Callsite {
    pub(crate) category: &'static str,
    pub(crate) name: &'static str,
    pub(crate) file: &'static str,
    pub(crate) line: u32,
    pub(crate) module: &'static str,
    pub(crate) arg_names: &'static [&'static str],
    /// Arguments whose value is the same in every record of the site (a
    /// `tracing` event's `level`): not in the records, written by each
    /// encoder from here, after the site's recorded arguments (JSON, OTLP)
    /// or within the packet's constant part (Perfetto). Only instants' sites
    /// have them.
    pub(crate) const_args: &'static [(&'static str, &'static str)],
    interest: AtomicU8,
    id: AtomicU32,
}

impl Callsite {
    pub const fn new(
        category: &'static str,
        name: &'static str,
        file: &'static str,
        line: u32,
        module: &'static str,
        arg_names: &'static [&'static str],
    ) -> Callsite {
        Callsite {
            category,
            name,
            file,
            line,
            module,
            arg_names,
            const_args: &[],
            interest: AtomicU8::new(UNREGISTERED),
            id: AtomicU32::new(0),
        }
    }

    /// The site with `const_args` (see the field).
    pub(crate) const fn with_const_args(
        mut self,
        const_args: &'static [(&'static str, &'static str)],
    ) -> Callsite {
        self.const_args = const_args;
        self
    }

    /// True if events of this site are recorded now. One relaxed load on the
    /// fast path.
    #[inline(always)]
    pub fn is_enabled(&'static self) -> bool {
        match self.interest.load(Ordering::Relaxed) {
            ENABLED => true,
            DISABLED => false,
            _ => self.register(),
        }
    }

    /// The dense id records carry (valid once registered; ids start at 1).
    #[inline(always)]
    pub(crate) fn id(&self) -> u32 {
        self.id.load(Ordering::Relaxed)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn category(&self) -> &'static str {
        self.category
    }

    #[cold]
    #[inline(never)]
    fn register(&'static self) -> bool {
        let mut reg = registry();
        if self.id.load(Ordering::Relaxed) == 0 {
            reg.sites.push(self);
            self.id.store(reg.sites.len() as u32, Ordering::Relaxed);
            if let Err(at) = reg.categories.binary_search(&self.category) {
                reg.categories.insert(at, self.category);
                CATEGORIES_KNOWN.store(reg.categories.len(), Ordering::Release);
            }
        }
        let on = reg.wants(self.category);
        self.interest
            .store(if on { ENABLED } else { DISABLED }, Ordering::Relaxed);
        on
    }
}

struct Registry {
    /// All registered sites; a site's id is its index + 1.
    sites: Vec<&'static Callsite>,
    /// The distinct categories of `sites`, sorted.
    categories: Vec<&'static str>,
    filter: CategoryFilter,
    /// A session is recording.
    active: bool,
    /// Categories that system tracing sessions record (see `set_system_wants`).
    system: Option<SystemWants>,
}

/// Which categories the live system tracing sessions record.
pub(crate) type SystemWants = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The registry, locked. A `std` mutex (a futex word), not `parking_lot`'s:
/// thousands of threads reaching a new call site at once must not each get
/// `parking_lot` thread data and grow its wait table (see `record::sync`).
/// A panic while it was held leaves the registry as it was.
fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

static REGISTRY: Lazy<Mutex<Registry>> = Lazy::new(|| {
    Mutex::new(Registry {
        sites: Vec::new(),
        categories: Vec::new(),
        filter: CategoryFilter::all(),
        active: false,
        system: None,
    })
});

impl Registry {
    /// A site of `category` records: the session's filter or a system
    /// tracing session wants it.
    fn wants(&self, category: &str) -> bool {
        self.active
            && (self.filter.enabled(category) || self.system.as_ref().is_some_and(|f| f(category)))
    }

    fn recompute(&self) {
        FILTER_GENERATION.fetch_add(1, Ordering::Release);
        for site in &self.sites {
            let on = self.wants(site.category);
            site.interest
                .store(if on { ENABLED } else { DISABLED }, Ordering::Relaxed);
        }
    }
}

/// Appends to `cache` every site registered since it was last filled.
pub(crate) fn sync_sites(cache: &mut Vec<&'static Callsite>) {
    let reg = registry();
    if cache.len() < reg.sites.len() {
        let from = cache.len();
        cache.extend_from_slice(&reg.sites[from..]);
    }
}

/// Changes each time the set of recorded categories changes.
static FILTER_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The current generation of the category filter (see `FILTER_GENERATION`).
pub(crate) fn filter_generation() -> u64 {
    FILTER_GENERATION.load(Ordering::Acquire)
}

/// Sets the categories system tracing sessions record, on top of the filter.
pub(crate) fn set_system_wants(wants: Option<SystemWants>) {
    let mut reg = registry();
    reg.system = wants;
    reg.recompute();
}

/// The distinct categories of the call sites registered so far, sorted.
pub(crate) fn known_categories() -> Vec<&'static str> {
    registry().categories.clone()
}

/// How many categories [`known_categories`] lists (it only grows). Set when
/// a site of a new category registers (cold, under the registry lock), so
/// the system producer notices new categories with one load per flusher
/// cycle instead of taking the lock.
static CATEGORIES_KNOWN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The number of distinct categories registered so far.
pub(crate) fn categories_known() -> usize {
    CATEGORIES_KNOWN.load(Ordering::Acquire)
}

pub(crate) fn set_active(active: bool) {
    let mut reg = registry();
    reg.active = active;
    reg.recompute();
}

pub(crate) fn replace_filter(filter: CategoryFilter) {
    let mut reg = registry();
    reg.filter = filter;
    reg.recompute();
}

/// Turns recording on for the categories matching any of `patterns`
/// (`"*"`, an exact name, or a prefix glob such as `"net.*"`), on top of the
/// current filter. Takes effect at once on every thread.
///
/// # Examples
///
/// ```
/// ringtrace::disable_categories(["*"]);
/// ringtrace::enable_categories(["io", "render"]);
/// assert!(ringtrace::category_enabled("io"));
/// assert!(!ringtrace::category_enabled("net"));
/// ringtrace::enable_categories(["*"]);
/// ```
pub fn enable_categories<I, S>(patterns: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut reg = registry();
    for p in patterns {
        reg.filter.push(p.as_ref(), true);
    }
    reg.recompute();
}

/// Turns recording off for the categories matching any of `patterns`; the
/// counterpart of [`enable_categories`]. The latest matching rule wins.
///
/// # Examples
///
/// ```
/// ringtrace::disable_categories(["verbose*"]);
/// assert!(!ringtrace::category_enabled("verbose.io"));
/// assert!(ringtrace::category_enabled("io"));
/// ringtrace::enable_categories(["*"]);
/// ```
pub fn disable_categories<I, S>(patterns: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut reg = registry();
    for p in patterns {
        reg.filter.push(p.as_ref(), false);
    }
    reg.recompute();
}

/// Whether the current filter lets `category` through (whether or not a
/// session is recording).
pub fn category_enabled(category: &str) -> bool {
    registry().filter.enabled(category)
}

/// An ordered list of enable/disable rules; the last rule matching a category
/// decides. A `"*"` rule supersedes every earlier rule, so the list stays short.
#[derive(Debug, Clone)]
pub(crate) struct CategoryFilter {
    rules: Vec<(String, bool)>,
}

impl CategoryFilter {
    pub(crate) fn all() -> Self {
        CategoryFilter {
            rules: vec![("*".to_string(), true)],
        }
    }

    pub(crate) fn none() -> Self {
        CategoryFilter {
            rules: vec![("*".to_string(), false)],
        }
    }

    pub(crate) fn push(&mut self, pattern: &str, enable: bool) {
        if pattern == "*" {
            self.rules.clear();
        } else {
            self.rules.retain(|(p, _)| p != pattern);
        }
        self.rules.push((pattern.to_string(), enable));
    }

    pub(crate) fn enabled(&self, category: &str) -> bool {
        self.rules
            .iter()
            .rev()
            .find(|(p, _)| super::pattern::matches(p, category))
            .map(|&(_, on)| on)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_matching_rule_wins() {
        let mut f = CategoryFilter::all();
        f.push("*", false);
        f.push("io", true);
        f.push("render*", true);
        assert!(f.enabled("io"));
        assert!(f.enabled("render.gpu"));
        assert!(!f.enabled("net"));
        f.push("io", false);
        assert!(!f.enabled("io"));
        assert_eq!(f.rules.len(), 3);
        assert!(!CategoryFilter::none().enabled("x"));
    }

    #[test]
    fn known_categories_grow_with_first_uses() {
        static A: Callsite = Callsite::new(
            "callsite-test.new",
            "a",
            file!(),
            line!(),
            module_path!(),
            &[],
        );
        static B: Callsite = Callsite::new(
            "callsite-test.new",
            "b",
            file!(),
            line!(),
            module_path!(),
            &[],
        );
        let before = categories_known();
        assert!(!known_categories().contains(&"callsite-test.new"));
        A.is_enabled();
        B.is_enabled();
        let known = known_categories();
        assert!(known.contains(&"callsite-test.new"));
        assert!(categories_known() > before);
        // Sorted, each once (other tests register sites concurrently).
        assert!(known.windows(2).all(|w| w[0] < w[1]), "{known:?}");
    }
}
