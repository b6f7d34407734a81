//! Every record is written or counted lost, whatever way it came in: the
//! `tracing` layer, the subscriber and the `log` bridge, with rings far too
//! small for the workload (nested spans, events, spans entered on two
//! threads, instrumented futures entered at each poll). What the program
//! produced is counted independently (a plain `tracing_subscriber::Layer`
//! beside ringtrace, a chained `log` logger); what was written is read back
//! from the trace with the official Perfetto schema or a JSON parser.

mod common;
use common::*;

#[test]
fn every_record_is_written_or_counted_lost_through_tracing_and_log() {
    for api in ["layer", "subscriber", "log"] {
        for ext in ["pftrace", "json"] {
            let (trace, on) = run_scenario_ok(
                &format!("acct-{api}-{ext}"),
                &format!("acct.{ext}"),
                "accounting",
                &[("ACC_API", api), ("ACC_ROUNDS", "800")],
            );
            let (written, marked) = if ext == "json" {
                json_written(&trace)
            } else {
                perfetto_written(&trace)
            };
            let lost = on["events_lost"].as_u64().unwrap();
            let produced = on["records"].as_u64().unwrap();
            assert!(lost > 0, "{api} {ext}: the rings must overflow: {on}");
            assert!(written > 0, "{api} {ext}: {on}");
            assert_eq!(
                written + lost,
                produced,
                "{api} {ext}: {written} written + {lost} lost: {on}"
            );
            assert_eq!(
                marked, lost,
                "{api} {ext}: losses marked in the trace: {on}"
            );
            assert_eq!(on["unmatched_ends"], 0, "{api} {ext}: {on}");
            if api != "log" {
                assert_eq!(on["spans_still_open"], 0, "{api} {ext}: {on}");
                assert!(on["moved"].as_u64().unwrap() > 0, "{api} {ext}: {on}");
            }
            eprintln!("{api} {ext}: {written} written + {lost} lost = {produced}: {on}");
        }
    }
}

/// The same through the macros and the typed API, for comparison: their
/// scopes count a dropped begin's end as lost too.
#[test]
fn losses_in_json_add_up_like_in_perfetto() {
    let (trace, on) = run_scenario_ok("acct-drop-json", "drop.json", "drop_mode_loss", &[]);
    let (written, marked) = json_written(&trace);
    let lost = on["events_lost"].as_u64().unwrap();
    assert!(lost > 0, "{on}");
    assert_eq!(written + lost, on["records"].as_u64().unwrap(), "{on}");
    assert_eq!(marked, lost, "{on}");
}
