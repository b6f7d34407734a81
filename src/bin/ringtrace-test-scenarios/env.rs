//! A session configured only by the environment, for `tests/env_values.rs`:
//! prints `ok` (a session started and stopped), `off` (`RINGTRACE_OUTPUT`
//! unset: `Ok(None)`) and exits 0, or prints the error and exits 2.

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
