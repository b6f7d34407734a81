//! A session configured only by the environment, for `tests/env_values.rs`:
//! prints `ok` (a session started and stopped; `layer`: the roots sampling
//! kept and skipped), `off` (`RINGTRACE_OUTPUT` unset: `Ok(None)`) and
//! exits 0, or prints the error and exits 2.

use std::process::exit;

/// `ringtrace::init_from_env`.
pub fn check() -> ! {
    let result = match ringtrace::init_from_env() {
        Ok(None) => Ok("off"),
        Ok(Some(guard)) => {
            ringtrace::trace_scope!("env", "configured");
            guard.stop().map(|_| "ok")
        }
        Err(e) => Err(e),
    };
    report(result)
}

/// `ringtrace::builder().from_env()` finished by `.subscriber()` (which
/// records `tracing` spans, sampled by `RINGTRACE_SAMPLE` and
/// `RINGTRACE_SAMPLE_ROOTS`).
pub fn check_tracing() -> ! {
    let configured = ringtrace::builder().from_env();
    let result = match configured.and_then(|b| b.map(|b| b.subscriber()).transpose()) {
        Ok(None) => Ok("off"),
        Ok(Some((subscriber, guard))) => {
            tracing::subscriber::with_default(subscriber, || {
                let _request = tracing::info_span!("request").entered();
                tracing::info!("configured");
            });
            guard.stop().map(|_| "ok")
        }
        Err(e) => Err(e),
    };
    report(result)
}

/// `ringtrace::builder().sample_ratio(1.0).from_env()` finished by
/// `.layer()`: ten roots `request` and one `health` recorded through it,
/// then `kept K skipped S` (the session's root counts), so that the
/// environment's sampling is seen over the builder's own.
pub fn layer() -> ! {
    use tracing_subscriber::prelude::*;
    let configured = ringtrace::builder().sample_ratio(1.0).from_env();
    let result = match configured.and_then(|b| b.map(|b| b.layer()).transpose()) {
        Ok(None) => Ok("off".to_owned()),
        Ok(Some((layer, guard))) => {
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
                for id in 0..10 {
                    let _request = tracing::info_span!("request", id).entered();
                    tracing::info!("handled");
                }
                let _health = tracing::info_span!("health").entered();
            });
            guard
                .stop()
                .map(|s| format!("kept {} skipped {}", s.roots_kept, s.roots_skipped))
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(what) => report(Ok(&what)),
        Err(e) => report(Err(e)),
    }
}

fn report(result: Result<&str, ringtrace::Error>) -> ! {
    match result {
        Ok(what) => {
            println!("{what}");
            exit(0)
        }
        Err(e) => {
            println!("{e}");
            exit(2)
        }
    }
}
