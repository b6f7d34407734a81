//! System tracing: this program registers with Perfetto's tracing service
//! (`traced`) and records for whichever tracing session enables its
//! categories (`demo.work`, `demo.io`), while it runs. The commands that
//! start `traced` and a session are in the guide `ringtrace::guide::system_tracing`
//! (`sdk/docs/system-tracing.md`).
//!
//! ```sh
//! cargo run --example system_trace     # runs 60 s; or pass the seconds
//! ```

use std::time::{Duration, Instant};

fn main() -> Result<(), ringtrace::Error> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let trace = ringtrace::builder()
        .system_tracing(true)
        .process_name("ringtrace.demo")
        .start()?;
    println!(
        "recording for system tracing sessions for {seconds} s (categories demo.work, demo.io)"
    );
    let until = Instant::now() + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..2)
        .map(|w| {
            std::thread::spawn(move || {
                let mut round = 0u64;
                while Instant::now() < until {
                    ringtrace::trace_scope!("demo.work", "round", worker = w, round = round);
                    {
                        ringtrace::trace_scope!("demo.io", "read", bytes = 4096u64);
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    ringtrace::trace_counter!("demo.work", "queue", (round % 16) as i64);
                    std::thread::sleep(Duration::from_millis(8));
                    round += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let stats = trace.stop()?;
    println!("done ({} events lost)", stats.events_lost);
    Ok(())
}
