//! A module that glob-imports both `ringtrace` and `tracing` compiles and
//! means what it says: no name at ringtrace's root is one of `tracing`'s, so
//! every name below resolves to one item. A name added to the root that
//! `tracing` also has makes this file fail to build (an ambiguous glob
//! import is an error for macros, a denied future-compatibility lint for
//! types). `tracing`'s `trace!` is called unqualified: ringtrace's
//! attribute is `traced`, and no `trace` is left at its root.
#![deny(ambiguous_glob_imports)]

use ringtrace::*;
use tracing::*;

#[traced]
fn ringtrace_attribute(n: u32) -> u32 {
    trace_scope!("inner", n = n);
    n + 1
}

#[instrument]
fn tracing_attribute(n: u32) -> u32 {
    n * 2
}

#[test]
fn ringtrace_and_tracing_names_resolve_together() {
    // tracing's root names.
    let _: Level = Level::INFO;
    let _: Option<&Event<'_>> = None;
    let _: Option<Id> = None;
    let _: Option<&Metadata<'_>> = None;
    let _: Option<Dispatch> = None;
    let _: Option<&dyn Value> = None;
    let _: Option<&dyn Subscriber> = None;
    let _: Option<&dyn Callsite> = None;
    let no_subscriber = subscriber::NoSubscriber::default();
    let _: field::Empty = field::Empty;
    let span: Span = info_span!("s");
    let _future = async {}.instrument(span.clone());
    // ringtrace's root names, in the same scope.
    let buf = MemoryBuffer::new();
    let guard = builder()
        .writer(buf.clone())
        .format(Format::Json)
        .start()
        .unwrap();
    dispatcher::with_default(&Dispatch::new(no_subscriber), || {
        trace!("tracing's trace!");
        debug!("d");
        info!("i");
        warn!("w");
        error!("e");
        event!(Level::WARN, "event!");
        let _e = span.enter();
    });
    trace_instant!("instant");
    trace_counter!("counter", 3);
    trace_log!(LogLevel::Info, "ringtrace's log");
    category!("glob").instant("typed").emit();
    assert_eq!(ringtrace_attribute(1), 2);
    assert_eq!(tracing_attribute(2), 4);
    let stats: Stats = guard.stop().unwrap();
    // The instant, the counter, the log message, the typed instant and the
    // two slices: what ringtrace's names recorded, and nothing of tracing's
    // (no ringtrace subscriber was set).
    let text = String::from_utf8(buf.contents()).unwrap();
    for name in [
        "\"instant\"",
        "\"counter\"",
        "\"typed\"",
        "\"ringtrace_attribute\"",
        "\"inner\"",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }
    assert!(!text.contains("tracing's trace!"), "{text}");
    assert!(stats.events_written >= 6, "{stats:?}");
}
