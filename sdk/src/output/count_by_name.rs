//! An output written from the seam's module doc alone (a newcomer's
//! check): it counts the begins and instants of each name the session
//! records, and is driven here by a real session's flusher.

use super::{Asked, Item, Output, Pass, Tally, Wants};
use crate::encode::Context;
use crate::record::layout::{parse, Record};
use crate::stats::Stats;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Events per name, shared with whoever reads them.
#[derive(Default, Clone)]
pub(crate) struct CountByName(pub(crate) Arc<Mutex<BTreeMap<&'static str, u64>>>);

impl Output for CountByName {
    fn plan(&mut self, _: &mut Context<'_>, _: &Asked) -> Wants {
        Wants::default()
    }

    fn take(&mut self, ctx: &mut Context<'_>, item: Item<'_>, _: &mut Tally) {
        let Item::Batch(_, batch) = item else {
            return;
        };
        let mut counts = self.0.lock().unwrap();
        for record in parse(batch.words) {
            let site = match record {
                Record::Begin { site, .. } | Record::Instant { site, .. } => site,
                _ => continue,
            };
            if let Some(cs) = ctx.sites.get(site) {
                *counts.entry(cs.name).or_default() += 1;
            }
        }
    }

    fn end(&mut self, _: &mut Context<'_>, _: &Pass, _: u64, _: &mut Tally) {}

    fn totals(&mut self, _: &mut Stats) -> Option<std::io::Error> {
        None
    }
}

#[test]
fn a_session_counts_events_per_name_through_an_output_of_its_own() {
    let _one = crate::session::tests::serial();
    let counts = CountByName::default();
    *crate::session::tests::TEST_OUTPUT.lock().unwrap() = Some(Box::new(counts.clone()));
    let guard = crate::builder()
        .writer(crate::MemoryBuffer::new())
        .start()
        .unwrap();
    for _ in 0..3 {
        crate::trace_scope!("counted", "work");
    }
    crate::trace_instant!("counted", "tick");
    guard.stop().unwrap();
    let counts = counts.0.lock().unwrap();
    assert_eq!(counts.get("work"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("tick"), Some(&1), "{counts:?}");
}
