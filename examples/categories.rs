//! Categories switched at run time: a noisy category is off until a condition
//! turns it on, from another thread, without restarting the session.
//!
//! Run: `cargo run --example categories` and open the printed file in
//! https://ui.perfetto.dev.

use std::thread;
use std::time::Duration;

fn main() -> Result<(), ringtrace::Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "categories.pftrace".to_string());
    let trace = ringtrace::builder()
        .output(&path)
        .enable_categories(["*"])
        .disable_categories(["verbose*"]) // off at start
        .start()?;

    for round in 0..6 {
        if round == 2 {
            // Any thread may change the filter; it takes effect everywhere at once.
            thread::spawn(|| ringtrace::enable_categories(["verbose.io"]))
                .join()
                .unwrap();
        }
        if round == 4 {
            ringtrace::disable_categories(["verbose*"]);
        }
        ringtrace::trace_scope!("app", "round", round = round);
        ringtrace::trace_instant!("verbose.io", "detail", round = round); // only in rounds 2 and 3
        println!(
            "round {round}: verbose.io is {}",
            if ringtrace::category_enabled("verbose.io") {
                "on"
            } else {
                "off"
            }
        );
        thread::sleep(Duration::from_millis(2));
    }

    let stats = trace.stop()?;
    println!(
        "wrote {} trace events to {path}; open it at https://ui.perfetto.dev",
        stats.events_written
    );
    Ok(())
}
