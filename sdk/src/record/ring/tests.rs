//! The ring's unit tests: both modes, growth (into its own segments, the
//! consumer's spares and pooled ones), mapping in ahead of the producer,
//! and the budget getting every byte back.
//!
//! One file: every test drives the one type, `Ring`, through the shared
//! helpers (`write`, `take_ids`, `records`, `grow_to`).

use super::*;
use crate::record::budget::ms_at;
use crate::record::header::{header_kind, header_len, header_payload, make_header, KIND_LOST};
use crate::record::segment::{
    alloc_mapped, free_mapped, unpack_segment, PAGE, PREFAULT_STEP_WORDS, TOUCH_PAGES,
};

/// Writes record `id` of `len` words (its header, then `id * 100 + k` for
/// word `k`): odd ids word by word, even ones with `push_words`, so every
/// test drives both ways of storing.
fn write(ring: &Ring, id: u64, len: usize) -> bool {
    match ring.reserve(len, id) {
        Some(mut r) => {
            r.push(make_header(9, len, id));
            if id % 2 == 1 {
                for i in 1..len {
                    r.push(id * 100 + i as u64);
                }
            } else {
                let body: Vec<u64> = (1..len).map(|i| id * 100 + i as u64).collect();
                r.push_words(&body);
            }
            r.commit();
            true
        }
        None => false,
    }
}

/// Moves the ids of the records `write` wrote out of `out` into `ids`,
/// checking that no record is torn (loss markers are passed over).
fn take_ids(out: &mut Vec<u64>, ids: &mut Vec<u64>) {
    let mut i = 0;
    while i < out.len() {
        let len = header_len(out[i]) as usize;
        if header_kind(out[i]) != KIND_LOST {
            let id = header_payload(out[i]);
            for k in 1..len {
                assert_eq!(out[i + k], id * 100 + k as u64, "record {id} torn");
            }
            ids.push(id);
        }
        i += len;
    }
    out.clear();
}

/// A thread writing records 0..n of 2 to 6 words into `ring`; it
/// returns how many were written (the rest were dropped).
fn spawn_producer(ring: &std::sync::Arc<Ring>, n: u64) -> std::thread::JoinHandle<u64> {
    let ring = ring.clone();
    std::thread::spawn(move || {
        (0..n)
            .filter(|&id| write(&ring, id, 2 + (id % 5) as usize))
            .count() as u64
    })
}

fn records(words: &[u64]) -> Vec<(u64, u64, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let len = header_len(words[i]) as usize;
        assert!(len > 0, "a torn record at word {i}: {:#x}", words[i]);
        out.push((header_kind(words[i]), header_payload(words[i]), len));
        i += len;
    }
    out
}

#[test]
fn drop_mode_counts_and_marks_the_gap() {
    let ring = Ring::with_words(64, false);
    let mut written = 0;
    for id in 0..40 {
        if write(&ring, id, 3) {
            written += 1;
        }
    }
    assert_eq!(written, 21); // 64 words / 3
    assert_eq!(ring.dropped(), 19);
    let mut out = Vec::new();
    let mut seen = 0;
    ring.drain(&mut out, usize::MAX, &mut seen);
    assert!(write(&ring, 99, 3));
    ring.drain(&mut out, usize::MAX, &mut seen);
    let recs = records(&out);
    assert_eq!(recs.len(), 23);
    assert_eq!(recs[21].0, KIND_LOST);
    assert_eq!(out[out.len() - 4], 19); // count in the marker, right before record 99
    assert_eq!(recs[22].1, 99);
}

#[test]
fn records_stored_in_one_run_wrap_at_every_offset() {
    // A 64-word ring drained after each record: records of 2 to 11 words
    // start at every offset, so `push_words` meets the segment's end at
    // every point of a record (and not at all).
    let ring = Ring::with_words(64, false);
    let (mut out, mut ids, mut seen) = (Vec::new(), Vec::new(), 0);
    let mut at = 0u64;
    for id in 0..640u64 {
        let len = 2 + (id % 10) as usize;
        assert!(write(&ring, 2 * id, len), "record {id} dropped");
        ring.drain(&mut out, usize::MAX, &mut seen);
        assert_eq!(header_len(out[0]) as usize, len);
        take_ids(&mut out, &mut ids);
        at += len as u64;
    }
    assert!(at > 64 * 64, "the ring wrapped many times");
    assert_eq!(ids, (0..640).map(|id| 2 * id).collect::<Vec<_>>());
    assert_eq!(ring.dropped(), 0);
}

#[test]
fn overwrite_mode_keeps_the_newest() {
    let ring = Ring::with_words(64, true);
    for id in 0..100 {
        assert!(write(&ring, id, 5));
    }
    let mut out = Vec::new();
    let mut seen = 0;
    let d = ring.drain(&mut out, usize::MAX, &mut seen);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(ids.len() as u64 + d.overwritten, 100);
    assert_eq!(*ids.last().unwrap(), 99);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1));
    // payload intact across the wrap
    for (k, chunk) in out.chunks(5).enumerate() {
        assert_eq!(chunk[1], ids[k] * 100 + 1);
    }
}

#[test]
fn a_full_ring_grows_and_keeps_every_record_in_order() {
    let budget = Budget::leaked(u64::MAX);
    let ring = Ring::growable(8, 64, false, budget);
    for id in 0..20 {
        assert!(write(&ring, id, 3), "record {id} dropped");
    }
    assert_eq!(ring.capacity_words(), 64); // 8 -> 32 -> 64
    let held = segment_bytes(8) + segment_bytes(32) + segment_bytes(64);
    assert_eq!(budget.used(), held);
    let mut out = Vec::new();
    let mut seen = 0;
    ring.drain(&mut out, usize::MAX, &mut seen);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
    for (k, chunk) in out.chunks(3).enumerate() {
        assert_eq!(chunk[1], k as u64 * 100 + 1, "payload of record {k}");
    }
    // The outgrown segments are freed once drained; the newest stays.
    assert_eq!(budget.used(), segment_bytes(64));
    // At its largest size it drops (and marks) like a fixed ring.
    let written = (20..60).filter(|&id| write(&ring, id, 3)).count();
    assert_eq!(written, 21);
    assert_eq!(ring.dropped(), 19);
    drop(ring);
    assert_eq!(budget.used(), 0, "every segment given back");
}

#[test]
fn growth_stops_at_the_budget_and_drops_are_counted() {
    let budget = Budget::leaked(segment_bytes(8) + segment_bytes(32));
    let ring = Ring::growable(8, 1024, false, budget);
    let written = (0..30).filter(|&id| write(&ring, id, 2)).count();
    assert_eq!(written, 20, "8 words, then 32 more after growing once");
    assert_eq!(ring.capacity_words(), 32);
    assert_eq!(ring.dropped(), 10);
    assert!(budget.refused() > 0);
    let mut out = Vec::new();
    let mut seen = 0;
    ring.drain(&mut out, usize::MAX, &mut seen);
    // Draining gave the first segment back; the ring writes on.
    assert_eq!(budget.used(), segment_bytes(32));
    assert!(write(&ring, 99, 2));
    ring.drain(&mut out, usize::MAX, &mut seen);
    let recs = records(&out);
    assert_eq!(recs.len(), 22);
    assert_eq!(recs[20].0, KIND_LOST);
    assert_eq!(out[out.len() - 3], 10, "the marker counts the 10 drops");
    assert_eq!(recs[21].1, 99);
}

#[test]
fn growing_into_mapped_segments_and_back() {
    // 1 KiB on the heap, then mapped segments of 4 KiB, 16 KiB, 64 KiB.
    let budget = Budget::leaked(u64::MAX);
    let ring = Ring::growable(128, 8192, false, budget);
    let mut out = Vec::new();
    let mut seen = 0;
    let mut ids = Vec::new();
    for round in 0..4u64 {
        for id in round * 2000..(round + 1) * 2000 {
            assert!(write(&ring, id, 3), "record {id} dropped");
        }
        out.clear();
        ring.drain(&mut out, usize::MAX, &mut seen);
        ids.extend(records(&out).iter().map(|r| r.1));
    }
    assert_eq!(ids, (0..8_000).collect::<Vec<_>>());
    assert_eq!(ring.capacity_words(), 8192);
    assert_eq!(budget.used(), segment_bytes(8192));
}

/// A large new segment is mapped in step by step ahead of the producer:
/// the fast path never writes past what is mapped in, and once the
/// producer has gone round the segment, all of it is.
#[test]
fn a_large_segment_is_mapped_in_ahead_of_the_producer() {
    for overwrite in [false, true] {
        let budget = Budget::leaked(u64::MAX);
        let big = 4 * PREFAULT_STEP_WORDS as usize; // four steps
        let ring = Ring::growable(big / 4, big, overwrite, budget);
        let p = &*ring.producer;
        let (mut steps, mut last, mut written) = (0, 0, 0);
        // Nothing drains: drop mode fills the large segment once and then
        // drops; overwrite mode goes round it a second time.
        for id in 0..(big as u64) {
            written += write(&ring, id, 3) as u64;
            let pre = p.prefaulted.load(Ordering::Relaxed);
            let head = ring.head.load(Ordering::Relaxed);
            assert!(
                head <= pre,
                "overwrite {overwrite}, record {id}: head {head} past the mapped-in {pre}"
            );
            if pre != last {
                steps += 1;
                last = pre;
            }
        }
        assert_eq!(ring.capacity_words(), big, "grew into the large segment");
        assert_eq!(p.prefaulted.load(Ordering::Relaxed), u64::MAX);
        assert!(steps >= 4, "mapped in a step at a time ({steps} changes)");
        let lap = (big / 4 + big) as u64 / 3; // both segments, 3 words each
        match overwrite {
            false => assert!(written >= lap - 2 && written < big as u64, "{written}"),
            true => assert_eq!(written, big as u64),
        }
        assert_drains_a_run_ending_at(&ring, written - 1, written);
    }
}

/// Drains `ring` and checks its records are whole and a run of ids ending
/// at `last`, with `written` records written or overwritten in all.
fn assert_drains_a_run_ending_at(ring: &Ring, last: u64, written: u64) {
    let (mut out, mut seen) = (Vec::new(), 0);
    let d = ring.drain(&mut out, usize::MAX, &mut seen);
    let recs = records(&out);
    assert!(!recs.is_empty());
    for (i, &(kind, id, len)) in recs.iter().enumerate() {
        let want = last + 1 - recs.len() as u64 + i as u64;
        assert_eq!(
            (kind, id, len),
            (9, want, 3),
            "record {i} of {}",
            recs.len()
        );
    }
    assert_eq!(recs.len() as u64 + d.overwritten, written);
}

/// Growing into a small mapped segment in overwrite mode copies the
/// undrained records into it; mapping in the rest must leave them be.
#[test]
fn growth_into_mapped_segments_keeps_the_copied_records() {
    for overwrite in [false, true] {
        let ring = Ring::growable(128, 1 << 14, overwrite, Budget::leaked(u64::MAX));
        let n = 10_000;
        let written = (0..n).filter(|&id| write(&ring, id, 3)).count() as u64;
        assert!(ring.capacity_words() > 128 && written > 1024);
        let last = if overwrite { n - 1 } else { written - 1 };
        assert_drains_a_run_ending_at(&ring, last, written);
    }
}

#[test]
fn overwrite_mode_grows_then_keeps_the_newest() {
    let budget = Budget::leaked(u64::MAX);
    let ring = Ring::growable(8, 64, true, budget);
    for id in 0..100 {
        assert!(
            write(&ring, id, 3),
            "record {id}: overwrite mode never drops"
        );
    }
    assert_eq!(ring.capacity_words(), 64);
    assert_eq!(ring.dropped(), 0);
    let mut out = Vec::new();
    let mut seen = 0;
    let d = ring.drain(&mut out, usize::MAX, &mut seen);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(
        ids,
        (79..100).collect::<Vec<_>>(),
        "the newest 21 (64 words / 3)"
    );
    assert_eq!(d.overwritten, 79);
    // The outgrown segments went back to the budget.
    assert_eq!(budget.used(), segment_bytes(64));
}

/// Overwrite mode growing into mapped segments, nothing draining, with
/// pages mapped in by writing a word per page (`prefault`'s fallback,
/// what a kernel without `MADV_POPULATE_WRITE` gets): the records copied
/// into a new segment are not zeroed, so freeing the oldest goes on.
/// (It used to zero the header at the copied tail, and the producer
/// looped forever on a record of length 0.)
#[test]
fn overwrite_mode_grows_into_mapped_segments_with_pages_touched() {
    TOUCH_PAGES.store(true, std::sync::atomic::Ordering::Relaxed);
    let budget = Budget::leaked(u64::MAX);
    // 1 KiB on the heap, then mapped segments of 4 KiB and 8 KiB.
    let ring = Ring::growable(128, 1024, true, budget);
    for id in 0..10_000 {
        assert!(write(&ring, id, 4), "record {id}");
    }
    TOUCH_PAGES.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(ring.capacity_words(), 1024);
    let mut out = Vec::new();
    let mut seen = 0;
    let d = ring.drain(&mut out, usize::MAX, &mut seen);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(ids, (9_744..10_000).collect::<Vec<_>>(), "the newest 256");
    assert_eq!(d.overwritten, 9_744);
    for (k, chunk) in out.chunks(4).enumerate() {
        assert_eq!(chunk[1], ids[k] * 100 + 1, "payload of record {}", ids[k]);
    }
}

#[test]
fn overwrite_mode_grows_into_mapped_segments_keeping_the_copied_records() {
    // 128 words on the heap, then mapped segments of 512 and 1024
    // words: mapping in ahead of the producer must not touch the slots
    // of the records copied into them (the fallback writes a zero per
    // page; the scenario `overwrite_mode` hung on such a zeroed header).
    let budget = Budget::leaked(u64::MAX);
    let ring = Ring::growable(128, 1024, true, budget);
    for id in 0..2000 {
        assert!(write(&ring, id, 4), "record {id}");
    }
    assert_eq!(ring.capacity_words(), 1024);
    let mut out = Vec::new();
    let mut seen = 0;
    ring.drain(&mut out, usize::MAX, &mut seen);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(ids, (1744..2000).collect::<Vec<_>>(), "the newest 256");
}

/// The base address of the producer's segment.
fn producer_base(ring: &Ring) -> usize {
    ring.producer.base.load(Ordering::Relaxed) as usize
}

/// A spare the consumer prepared is what the ring grows into: no
/// segment of the producer's own, the spare's bytes already counted,
/// and the records on both sides of the growth whole (overwrite mode
/// copies its undrained records into the spare).
#[test]
fn a_ring_grows_into_the_spare_segment_prepared_for_it() {
    for overwrite in [false, true] {
        let budget = Budget::leaked(u64::MAX);
        let ring = Ring::growable(128, 1 << 14, overwrite, budget);
        let mut id = 0;
        while ring.segments_made() < 2 {
            assert!(write(&ring, id, 3));
            id += 1;
        }
        assert_eq!(ring.capacity_words(), 512);
        assert!(ring.prepare_spare(), "a spare of 2048 words");
        let (spare, words) = unpack_segment(ring.spare.load(Ordering::Relaxed));
        assert_eq!(words, 2048);
        let held = segment_bytes(128) + segment_bytes(512) + segment_bytes(2048);
        assert_eq!(budget.used(), held, "the spare is in the budget");
        assert!(ring.prepare_spare(), "ready: nothing more is made");
        assert_eq!(budget.used(), held);
        while ring.segments_made() < 3 {
            assert!(write(&ring, id, 3));
            id += 1;
        }
        assert_eq!(producer_base(&ring), spare as usize, "grew into the spare");
        assert_eq!(ring.capacity_words(), 2048);
        assert_eq!(ring.spare.load(Ordering::Relaxed), 0);
        assert_eq!(budget.used(), held, "counted once");
        for _ in 0..500 {
            assert!(write(&ring, id, 3));
            id += 1;
        }
        assert_drains_a_run_ending_at(&ring, id - 1, id);
        drop(ring);
        assert_eq!(budget.used(), 0);
    }
}

/// A spare too small for the growth it was made for (a large record
/// made the ring grow more) is left for the consumer, which frees it and
/// makes the next one; one never taken is freed with the ring. The
/// budget gets every byte back once.
#[test]
fn a_stale_or_unused_spare_goes_back_to_the_budget() {
    let budget = Budget::leaked(u64::MAX);
    let ring = Ring::growable(8, 1024, false, budget);
    assert!(ring.prepare_spare());
    assert_eq!(unpack_segment(ring.spare.load(Ordering::Relaxed)).1, 32);
    assert!(
        write(&ring, 1, 20),
        "grows to 128 words: more than the spare"
    );
    assert_eq!(ring.capacity_words(), 128);
    assert_eq!(
        unpack_segment(ring.spare.load(Ordering::Relaxed)).1,
        32,
        "left"
    );
    assert_eq!(
        budget.used(),
        segment_bytes(8) + segment_bytes(128) + segment_bytes(32)
    );
    assert!(ring.prepare_spare(), "the stale one freed, the next made");
    assert_eq!(unpack_segment(ring.spare.load(Ordering::Relaxed)).1, 512);
    assert_eq!(
        budget.used(),
        segment_bytes(8) + segment_bytes(128) + segment_bytes(512)
    );
    assert!(ring.reclaim_spare());
    assert!(!ring.reclaim_spare(), "once");
    assert_eq!(budget.used(), segment_bytes(8) + segment_bytes(128));
    assert!(ring.prepare_spare());
    drop(ring);
    assert_eq!(budget.used(), 0, "the unused spare freed with the ring");
}

/// A spare is a guess: it is made only while the budget keeps as much
/// again free, and never past the ring's largest size.
#[test]
fn a_spare_never_takes_the_last_of_the_budget() {
    let budget = Budget::leaked(segment_bytes(8) + 2 * segment_bytes(32) - 8);
    let ring = Ring::growable(8, 32, false, budget);
    assert!(
        !ring.prepare_spare(),
        "32 words would leave less than 32 free"
    );
    assert_eq!(budget.used(), segment_bytes(8));
    assert!(
        (0..4).all(|id| write(&ring, id, 3)),
        "the ring grows itself"
    );
    assert_eq!(ring.capacity_words(), 32);
    let mut out = Vec::new();
    ring.drain(&mut out, usize::MAX, &mut 0);
    assert!(!ring.prepare_spare(), "at its largest size");
    assert_eq!(budget.used(), segment_bytes(32));
}

/// The consumer prepares spares (mapping them in after handing them
/// over) while the producer grows into them and writes, in both modes,
/// and with pages mapped in by writing a word per page: nothing is torn
/// or lost, and the budget ends with the newest segment only.
#[test]
fn concurrent_spares_lose_and_tear_nothing() {
    for (overwrite, touch) in [(false, false), (true, false), (true, true)] {
        TOUCH_PAGES.store(touch, std::sync::atomic::Ordering::Relaxed);
        let budget = Budget::leaked(u64::MAX);
        let ring = std::sync::Arc::new(Ring::growable(128, 1 << 17, overwrite, budget));
        let n = 300_000u64;
        let producer = spawn_producer(&ring, n);
        let (mut out, mut seen, mut ids, mut overwritten) = (Vec::new(), 0, Vec::new(), 0);
        let mut made = 0;
        while !producer.is_finished() {
            if ring.segments_made() != made {
                made = ring.segments_made();
                ring.prepare_spare();
            }
            overwritten += ring.drain(&mut out, 1 << 12, &mut seen).overwritten;
            take_ids(&mut out, &mut ids);
        }
        let written = producer.join().unwrap();
        overwritten += ring.drain(&mut out, usize::MAX, &mut seen).overwritten;
        take_ids(&mut out, &mut ids);
        TOUCH_PAGES.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ids.len() as u64 + overwritten, written);
        assert_eq!(written + ring.dropped(), n);
        ring.reclaim_spare();
        assert_eq!(budget.used(), segment_bytes(ring.capacity_words()));
    }
}

#[test]
fn a_record_larger_than_the_segment_grows_the_ring() {
    let ring = Ring::growable(8, 256, false, Budget::leaked(u64::MAX));
    assert!(write(&ring, 1, 40));
    assert_eq!(ring.capacity_words(), 256);
    assert!(!write(&ring, 2, 65), "over a quarter of the largest size");
    assert_eq!(ring.oversized(), 1);
}

#[test]
fn concurrent_growth_loses_and_tears_nothing() {
    let budget = Budget::leaked(u64::MAX);
    let ring = std::sync::Arc::new(Ring::growable(8, 1 << 12, false, budget));
    let producer = spawn_producer(&ring, 100_000);
    let mut out = Vec::new();
    let mut seen = 0;
    let mut ids = Vec::new();
    while !producer.is_finished() {
        ring.drain(&mut out, 1 << 10, &mut seen);
        take_ids(&mut out, &mut ids);
    }
    let written = producer.join().unwrap();
    ring.drain(&mut out, usize::MAX, &mut seen);
    take_ids(&mut out, &mut ids);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(ids.len() as u64, written);
    assert_eq!(written + ring.dropped(), 100_000);
    assert_eq!(budget.used(), segment_bytes(ring.capacity_words()));
}

#[test]
fn oversized_records_are_counted() {
    let ring = Ring::with_words(64, false);
    assert!(!write(&ring, 1, 17));
    assert_eq!(ring.oversized(), 1);
    assert!(write(&ring, 2, 16));
}

#[test]
fn concurrent_drop_mode_loses_nothing_silently() {
    let ring = std::sync::Arc::new(Ring::with_words(512, false));
    let producer = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            for id in 0..200_000u64 {
                write(&ring, id, 2 + (id % 4) as usize);
            }
        })
    };
    let mut out = Vec::new();
    let mut seen = 0;
    let mut got = 0u64;
    let mut lost = 0u64;
    let mut last = None;
    let mut consume = |out: &mut Vec<u64>| {
        for r in records(out) {
            if r.0 == KIND_LOST {
                continue;
            }
            if let Some(l) = last {
                assert!(r.1 > l);
            }
            last = Some(r.1);
            got += 1;
        }
        out.clear();
    };
    while !producer.is_finished() {
        ring.drain(&mut out, 1 << 10, &mut seen);
        consume(&mut out);
    }
    producer.join().unwrap();
    ring.drain(&mut out, usize::MAX, &mut seen);
    consume(&mut out);
    lost += ring.dropped();
    assert_eq!(got + lost, 200_000);
}

/// Writes records of 3 words from `*id` on until `ring`'s segment has
/// `words` slots; returns the base of each segment it grew into.
fn grow_to(ring: &Ring, words: usize, id: &mut u64) -> Vec<usize> {
    let mut bases = Vec::new();
    while ring.capacity_words() < words {
        let made = ring.segments_made();
        assert!(write(ring, *id, 3), "record {id}");
        *id += 1;
        if ring.segments_made() != made {
            bases.push(producer_base(ring));
        }
    }
    bases
}

/// Segments a ring gave up (outgrown and drained, its spare, its last
/// at drop) wait in its budget's pool, counted in the budget; the next
/// ring's growths and spares take them instead of mapping new ones:
/// with the pool bypassed the budget would count both, and nothing
/// would be taken from the pool.
#[test]
fn a_second_ring_grows_into_the_segments_the_first_gave_up() {
    let budget = Budget::leaked(64 << 20);
    let pool = budget.pool();
    pool.open(usize::MAX);
    let a = Ring::growable(128, 1 << 13, false, budget);
    let mut id = 0;
    let a_bases = grow_to(&a, 1 << 13, &mut id);
    assert_eq!(a_bases.len(), 3, "512, 2048, 8192 words");
    a.drain(&mut Vec::new(), usize::MAX, &mut 0);
    let grown = segment_bytes(512) + segment_bytes(2048) + segment_bytes(8192);
    assert_eq!(
        pool.pooled_bytes(),
        segment_bytes(512) + segment_bytes(2048)
    );
    drop(a);
    assert_eq!(pool.pooled_bytes(), grown, "the newest at drop");
    assert_eq!(budget.used(), grown, "pooled bytes stay taken");

    let b = Ring::growable(128, 1 << 13, false, budget);
    let mut id = 1_000_000;
    let b_bases = grow_to(&b, 2048, &mut id);
    assert_eq!(pool.taken(), 2);
    assert_eq!(b_bases[..], a_bases[..2], "the same segments");
    assert_eq!(
        budget.used(),
        segment_bytes(128) + grown,
        "none mapped anew"
    );
    // The spare comes from the pool too: ready at once, no bytes taken.
    assert!(b.prepare_spare());
    assert_eq!(pool.taken(), 3);
    assert_eq!(pool.pooled_bytes(), 0);
    let b_bases = grow_to(&b, 8192, &mut id);
    assert_eq!(b_bases, vec![a_bases[2]]);
    assert_eq!(budget.used(), segment_bytes(128) + grown);
    let mut out = Vec::new();
    b.drain(&mut out, usize::MAX, &mut 0);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(ids, (1_000_000..id).collect::<Vec<_>>(), "b's records only");
    drop(b);
    pool.close();
    assert_eq!(budget.used(), 0, "every byte back once");
}

/// Reused segments hold the words of their earlier ring: records that
/// look whole, at other positions. None of them ever comes out of the
/// new ring, in drop mode (drained between growths, so segments start
/// at other positions than they did) and in overwrite mode (growth
/// copies, then the producer frees its own oldest records), nor does a
/// torn record.
#[test]
fn stale_words_of_pooled_segments_never_come_out() {
    for overwrite in [false, true] {
        let budget = Budget::leaked(64 << 20);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let a = Ring::growable(128, 1 << 13, overwrite, budget);
        let mut id = 0;
        grow_to(&a, 1 << 13, &mut id);
        for _ in 0..10_000 {
            assert!(write(&a, id, 3) || !overwrite);
            id += 1;
        }
        a.drain(&mut Vec::new(), usize::MAX, &mut 0);
        drop(a);
        let taken = pool.taken();
        let b = Ring::growable(128, 1 << 13, overwrite, budget);
        let (mut out, mut seen) = (Vec::new(), 0);
        let mut id = 1 << 30;
        let first = id;
        let mut ids = Vec::new();
        let mut overwritten = 0;
        for round in 0..41 {
            // Odd lengths, so positions shift against the stale records;
            // at most 1,168 records (<= 6 words) between drains: none
            // dropped. Overwrite mode's last round overwrites.
            let n = if overwrite && round == 40 {
                6_000
            } else {
                37 + round * 29
            };
            for _ in 0..n {
                let len = 2 + (id % 5) as usize;
                assert!(write(&b, id, len) || !overwrite);
                id += 1;
            }
            out.clear();
            overwritten += b.drain(&mut out, usize::MAX, &mut seen).overwritten;
            take_ids(&mut out, &mut ids);
        }
        assert!(pool.taken() > taken, "b grew into pooled segments");
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]) && ids[0] >= first,
            "only b's records, in order"
        );
        assert_eq!(*ids.last().unwrap(), id - 1);
        assert_eq!(b.dropped(), 0);
        assert_eq!(ids.len() as u64 + overwritten, id - first);
        assert_eq!(overwritten > 0, overwrite);
        drop(b);
        pool.close();
        assert_eq!(budget.used(), 0);
    }
}

/// A growth the pool cannot serve (4 MiB, above its largest class)
/// while the budget has room only with the pool's stock given back:
/// the growing thread gives it back and grows (before: the growth was
/// refused and the record dropped while the pool held 1.33 MiB).
#[test]
fn a_growth_past_the_pool_takes_back_the_stock_when_the_budget_is_short() {
    let budget = Budget::leaked(16 << 20);
    let pool = budget.pool();
    pool.open(usize::MAX);
    let stock = pool.stock();
    assert_eq!(stock, (4 + 16 + 64 + 256 + 1024) << 10);
    let ring = Ring::growable(1 << 17, 1 << 19, false, budget); // 1 MiB to 4 MiB
                                                                // Other threads leave 3 MiB free: the 4 MiB segment fits only with
                                                                // the stock given back.
    let others = budget.limit() - budget.used() - (3 << 20);
    assert!(budget.try_take(others));
    let mut id = 0;
    while ring.capacity_words() < 1 << 19 {
        assert!(
            write(&ring, id, 3),
            "record {id} dropped while the pool holds {} bytes",
            pool.pooled_bytes()
        );
        id += 1;
    }
    assert!(pool.pooled_bytes() < stock, "the stock gave way");
    assert_eq!(ring.dropped(), 0);
    drop(ring);
    budget.give_back(others);
    pool.close();
    assert_eq!(budget.used(), 0);
}

/// The budget full but for 512 bytes while the stock holds 84 KiB: a
/// new thread's first 1 KiB ring gets memory, its cold path giving
/// pooled segments back and asking again (it used to be refused).
#[test]
fn a_new_ring_takes_the_stock_back_when_the_budget_is_full() {
    let budget = Budget::leaked(1 << 20); // an eighth: 128 KiB
    let pool = budget.pool();
    pool.open(usize::MAX);
    assert_eq!(pool.stock(), (4 + 16 + 64) << 10);
    let rest = budget.limit() - budget.used();
    assert!(budget.try_take(rest - 512)); // other threads fill the budget
    let ring = Ring::new(1 << 10, 1 << 20, false, budget);
    let pooled = pool.pooled_bytes();
    assert!(
        ring.is_some(),
        "a 1 KiB first ring refused while the pool holds {pooled} bytes"
    );
    drop(ring);
    budget.give_back(rest - 512);
    pool.close();
    assert_eq!(budget.used(), 0);
}

/// A ring made while the budget is short takes what the pool gives
/// back, the smallest part of it that makes room (largest segments
/// first), and the pool keeps nothing more while the budget is short:
/// the flusher's trim gives back the rest, the stock included, and
/// neither `stock` nor `put` keeps any.
#[test]
fn a_short_budget_empties_the_pool_and_nothing_is_restocked() {
    let budget = Budget::leaked(1 << 20);
    let pool = budget.pool();
    pool.open(usize::MAX);
    assert_eq!(pool.stock(), (4 + 16 + 64) << 10);
    let rest = budget.limit() - budget.used();
    assert!(budget.try_take(rest - 512));
    let ring = Ring::new(1 << 10, 1 << 20, false, budget).expect("the pool gives way");
    assert_eq!(
        pool.pooled_bytes(),
        (4 + 16) << 10,
        "only the 64 KiB given back"
    );
    assert_eq!(
        pool.trim_at(ms_at(std::time::Instant::now())),
        2,
        "short: the stock goes"
    );
    assert_eq!(pool.pooled_bytes(), 0);
    assert_eq!(pool.stock(), 0, "short: no restock");
    let page = PAGE / 8;
    assert!(budget.try_take(segment_bytes(page)));
    let seg = alloc_mapped(page).expect("mmap");
    assert!(!pool.put(seg, page), "short: nothing kept");
    // SAFETY: mapped above, not pooled, freed once.
    unsafe { free_mapped(seg, page) };
    budget.give_back(segment_bytes(page));
    drop(ring);
    budget.give_back(rest - 512);
    assert_eq!(pool.stock(), (4 + 16 + 64) << 10, "room again");
    pool.close();
    assert_eq!(budget.used(), 0);
}

/// A thread's ring starts at 512 bytes on the heap and grows to a page at
/// once (a mapped segment), not to 2 KiB; then by four as before.
#[test]
fn a_threads_first_segment_grows_to_a_page() {
    use crate::record::registry::INITIAL_RING_BYTES;
    let ring = Ring::new(INITIAL_RING_BYTES, 1 << 20, false, Budget::leaked(u64::MAX)).unwrap();
    assert_eq!(ring.capacity_words(), 64);
    let mut id = 0;
    let mut sizes = vec![ring.capacity_words()];
    while sizes.len() < 3 {
        assert!(write(&ring, id, 2), "record {id} dropped");
        id += 1;
        if ring.capacity_words() != *sizes.last().unwrap() {
            sizes.push(ring.capacity_words());
        }
    }
    assert_eq!(sizes, [64, 512, 2048]);
    assert!(is_mapped(1, 512));
}

/// A ring growing from 512 bytes to the largest size a session allows (1 TiB)
/// with nothing freed reaches it within its segment slots: the last free
/// slot takes the largest size at once.
#[test]
fn a_ring_reaches_its_largest_size_within_the_segment_slots() {
    use crate::record::registry::INITIAL_RING_BYTES;
    for cap in [1 << 17, 1 << 23, 1 << 37] {
        let ring = Ring::growable(8, cap, false, Budget::leaked(u64::MAX));
        let (mut words, mut held) = (words_for(INITIAL_RING_BYTES), 1);
        while words < cap {
            words = ring.next_words(words, held, 2);
            held += 1;
        }
        assert_eq!(words, cap);
        assert!(
            held <= MAX_SEGMENTS as u64,
            "{held} segments to reach {cap}"
        );
    }
}

/// A flood into a ring growing from 1 KiB to 64 MiB with nothing drained
/// meanwhile (a flusher busy elsewhere): every record is kept while the cap
/// and the budget have room. Growing by four into each of the eight slots,
/// the ring stopped at 16 MiB and dropped the rest.
#[test]
fn a_flood_grows_the_ring_to_its_cap_with_nothing_drained() {
    let budget = Budget::leaked(256 << 20);
    let cap = 1 << 23; // 64 MiB
    let ring = Ring::growable(128, cap, false, budget);
    // 2.9M words: more than the eight sizes up to 16 MiB hold (2.8M).
    let n = 1_450_000u64;
    for id in 0..n {
        assert!(write(&ring, id, 2), "record {id} dropped");
    }
    assert_eq!(ring.capacity_words(), cap);
    assert_eq!(ring.segments_made(), MAX_SEGMENTS as u64);
    assert_eq!(ring.dropped(), 0);
    let mut out = Vec::new();
    ring.drain(&mut out, usize::MAX, &mut 0);
    let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
    assert_eq!(ids.len() as u64, n);
    assert!(ids.iter().enumerate().all(|(i, &id)| id == i as u64));
    assert_eq!(
        budget.used(),
        segment_bytes(cap),
        "the outgrown segments freed"
    );
}

/// Drop mode, drained in chunks smaller than what is published: runs of
/// two-word records (passed four at a time) broken by longer ones, cut at
/// every chunk size; each chunk ends where a record does, takes every
/// record that starts before its bound and no other, and nothing is torn
/// or lost.
#[test]
fn drop_mode_chunks_end_at_records_for_every_bound() {
    // Lengths: a run of 2s, a 3, 2s, a 5, 2s of every count mod 4, a 4.
    let lens: Vec<usize> = [
        vec![2; 9],
        vec![3],
        vec![2; 6],
        vec![5],
        vec![2; 7],
        vec![4],
    ]
    .concat()
    .repeat(3);
    for max_words in 1..=20 {
        let ring = Ring::with_words(1024, false);
        for (id, &len) in lens.iter().enumerate() {
            assert!(write(&ring, id as u64, len));
        }
        let (mut ids, mut out, mut seen) = (Vec::new(), Vec::new(), 0);
        let mut next = 0;
        loop {
            let d = ring.drain(&mut out, max_words, &mut seen);
            if d.words == 0 {
                break;
            }
            // Records whose start is before the bound, and only those.
            let mut start = 0;
            let mut expect = 0;
            while next + expect < lens.len() && start < max_words {
                start += lens[next + expect];
                expect += 1;
            }
            assert_eq!(d.words, start, "bound {max_words} at record {next}");
            let before = ids.len();
            take_ids(&mut out, &mut ids);
            assert_eq!(ids.len() - before, expect);
            next += expect;
        }
        let all: Vec<u64> = (0..lens.len() as u64).collect();
        assert_eq!(ids, all, "bound {max_words}");
    }
}
