//! Begins and ends of a decoded trace joined into complete slices.

use super::{Kind, TraceModel, Track};
use std::collections::HashMap;

/// Turns each begin and the end that closes it (the innermost open begin of
/// the same track) into one complete slice; an end's args (such as
/// `ringtrace.end_lost`) join the slice's. Begins never closed stay begins.
/// Events are paired in time order, as Perfetto's reader does (it sorts
/// every track's events by timestamp, equal ones in file order): a file may
/// hold an end before its begin (an async range found out by another
/// thread, its begin written later with its earlier timestamp).
pub(super) fn pair_slices(m: &mut TraceModel) {
    let mut open: HashMap<Track, Vec<usize>> = HashMap::new();
    let mut drop = vec![false; m.events.len()];
    let mut unmatched = 0;
    let mut order: Vec<usize> = (0..m.events.len()).collect();
    order.sort_by_key(|&i| m.events[i].ts); // stable
    for i in order {
        match m.events[i].kind {
            Kind::Begin => open.entry(m.events[i].track.clone()).or_default().push(i),
            Kind::End => {
                drop[i] = true;
                match open.get_mut(&m.events[i].track).and_then(Vec::pop) {
                    Some(b) => {
                        let end = m.events[i].clone();
                        let begin = &mut m.events[b];
                        begin.kind = Kind::Complete {
                            dur: end.ts - begin.ts,
                        };
                        begin.args.extend(end.args);
                    }
                    None => unmatched += 1,
                }
            }
            _ => {}
        }
    }
    let mut keep = drop.iter().map(|d| !d);
    m.events.retain(|_| keep.next().unwrap());
    if unmatched > 0 {
        m.warn(format!("{unmatched} slice end(s) without a begin, skipped"));
    }
}
