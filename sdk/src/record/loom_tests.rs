//! loom models of the lock-free parts: the ring in both modes and the
//! hand-over of a thread's ring to the flusher through the registry. Run with
//! `RUSTFLAGS="--cfg ringtrace_loom" cargo test --release -p ringtrace --lib loom_tests`.

use crate::record::budget::Budget;
use crate::record::header::{header_kind, header_len, header_payload, make_header, KIND_LOST};
use crate::record::registry::{Registry, RingConfig};
use crate::record::ring::Ring;
use crate::record::segment::segment_bytes;
use crate::record::sync::Ordering;
use loom::sync::Arc;
use loom::thread;

const KIND_TEST: u64 = 9;

/// Writes record `id`: header, ts, then `len - 2` payload words derived from id.
fn write(ring: &Ring, id: u64, len: usize) -> bool {
    match ring.reserve(len, id) {
        Some(mut r) => {
            r.push(make_header(KIND_TEST, len, id));
            r.push(id);
            for i in 2..len {
                r.push(id * 1000 + i as u64);
            }
            r.commit();
            true
        }
        None => false,
    }
}

/// Checks every record is whole and returns (ids, lost counts from markers).
fn decode(words: &[u64]) -> (Vec<u64>, u64) {
    let (mut ids, mut lost, mut i) = (Vec::new(), 0, 0);
    while i < words.len() {
        let len = header_len(words[i]) as usize;
        assert!(len >= 2 && i + len <= words.len(), "torn record");
        if header_kind(words[i]) == KIND_LOST {
            lost += words[i + 2];
        } else {
            let id = header_payload(words[i]);
            assert_eq!(words[i + 1], id);
            for k in 2..len {
                assert_eq!(
                    words[i + k],
                    id * 1000 + k as u64,
                    "payload of record {id} torn"
                );
            }
            ids.push(id);
        }
        i += len;
    }
    (ids, lost)
}

fn check_order(ids: &[u64]) {
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "records out of order: {ids:?}"
    );
}

#[test]
fn loom_tests_ring_drop_mode_counts_every_loss() {
    loom::model(|| {
        let ring = Arc::new(Ring::with_words(8, false));
        let p = {
            let ring = ring.clone();
            thread::spawn(move || (1..=4).filter(|&id| write(&ring, id, 3)).count() as u64)
        };
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        let written = p.join().unwrap();
        ring.drain(&mut out, usize::MAX, &mut seen);
        let (ids, marked) = decode(&out);
        check_order(&ids);
        assert_eq!(ids.len() as u64, written);
        assert_eq!(written + ring.dropped(), 4);
        assert_eq!(marked + ring.pending_lost(), ring.dropped());
    });
}

#[test]
fn loom_tests_ring_overwrite_mode_never_tears() {
    loom::model(|| {
        let ring = Arc::new(Ring::with_words(8, true));
        let p = {
            let ring = ring.clone();
            thread::spawn(move || {
                for id in 1..=4 {
                    assert!(write(&ring, id, 3));
                }
            })
        };
        let mut out = Vec::new();
        let mut seen = 0;
        let d1 = ring.drain(&mut out, usize::MAX, &mut seen);
        p.join().unwrap();
        let d2 = ring.drain(&mut out, usize::MAX, &mut seen);
        let (ids, _) = decode(&out);
        check_order(&ids);
        assert_eq!(ids.last(), Some(&4));
        assert_eq!(ids.len() as u64 + d1.overwritten + d2.overwritten, 4);
    });
}

/// A ring of 8 words growing to 16: a producer writes records `1..=n` of 3
/// words (never dropped) while the consumer drains once, then once more
/// after the producer is done. Returns the records copied out (checked
/// whole and in order) and the count reported overwritten.
fn grow_while_draining(overwrite: bool, n: u64) -> (Vec<u64>, u64) {
    let budget = Budget::leaked(u64::MAX);
    let ring = Arc::new(Ring::growable(8, 16, overwrite, budget));
    let p = {
        let ring = ring.clone();
        thread::spawn(move || {
            for id in 1..=n {
                assert!(write(&ring, id, 3), "record {id} dropped");
            }
        })
    };
    let mut out = Vec::new();
    let mut seen = 0;
    let d1 = ring.drain(&mut out, usize::MAX, &mut seen);
    p.join().unwrap();
    let d2 = ring.drain(&mut out, usize::MAX, &mut seen);
    let (ids, lost) = decode(&out);
    check_order(&ids);
    assert_eq!(lost, 0);
    assert_eq!(ring.dropped(), 0);
    assert_eq!(
        budget.used(),
        segment_bytes(16),
        "the outgrown segment is freed"
    );
    drop(ring);
    assert_eq!(budget.used(), 0, "every segment given back once");
    (ids, d1.overwritten + d2.overwritten)
}

/// The producer outgrows its first segment (8 words) while the consumer
/// drains: every record arrives whole and in order, nothing is dropped, and
/// the outgrown segment is freed (given back to the budget) exactly once.
#[test]
fn loom_tests_ring_grows_while_the_consumer_drains() {
    loom::model(|| {
        let (ids, overwritten) = grow_while_draining(false, 4);
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(overwritten, 0);
    });
}

/// Overwrite mode: the producer grows (copying what the consumer has not
/// taken yet into the new segment) and then frees its own oldest records,
/// while the consumer drains: records whole, in order, the newest kept, and
/// every record either copied out or counted as overwritten, none dropped.
#[test]
fn loom_tests_overwrite_ring_grows_and_overwrites_while_draining() {
    loom::model(|| {
        let (ids, overwritten) = grow_while_draining(true, 7);
        assert_eq!(ids.last(), Some(&7));
        assert_eq!(ids.len() as u64 + overwritten, 7);
    });
}

#[test]
fn loom_tests_exiting_thread_hands_over_everything() {
    loom::model(|| {
        let registry = Arc::new(Registry::new());
        registry.open(
            1,
            RingConfig {
                bytes: 512,
                budget_bytes: 1 << 20,
                overwrite: false,
                thread_time: false,
            },
        );
        let p = {
            let registry = registry.clone();
            thread::spawn(move || {
                let tr = registry.create(1, 1, 2, String::new()).unwrap();
                assert!(write(&tr.ring, 1, 2));
                assert!(write(&tr.ring, 2, 2));
                tr.retire();
            })
        };
        // The flusher: snapshot, drain, and stop once a retired ring is empty.
        let mut got = Vec::new();
        let mut seen = 0;
        let mut rings = Vec::new();
        loop {
            let mut added = Vec::new();
            registry.take_added(&mut added);
            rings.extend(added);
            let mut done = false;
            for tr in &rings {
                let retired = tr.is_retired();
                let mut out = Vec::new();
                tr.ring.drain(&mut out, usize::MAX, &mut seen);
                got.extend(decode(&out).0);
                if retired && tr.ring.used_words() == 0 {
                    registry.remove(&[tr.seq_id]);
                    done = true;
                }
            }
            if done {
                break;
            }
            thread::yield_now();
        }
        p.join().unwrap();
        assert_eq!(got, vec![1, 2]);
    });
}

/// The spare hand-over: the consumer prepares the segment the producer's
/// next growth wants (`prepare_spare`, a Release store of its word) while
/// the producer writes records that make its 8-word ring grow to 32, taking
/// the spare with a CAS if it is there in time, or making its own; then the
/// consumer drains and takes back a spare left unused (`reclaim_spare`, a
/// CAS too). Whoever wins the spare owns it: records arrive whole and in
/// order (overwrite mode copies its undrained ones into the spare), and every
/// segment, the spare included, is given back to the budget exactly once.
fn spare_while_growing(overwrite: bool, n: u64) -> (Vec<u64>, u64) {
    let budget = Budget::leaked(u64::MAX);
    let ring = Arc::new(Ring::growable(8, 32, overwrite, budget));
    let p = {
        let ring = ring.clone();
        thread::spawn(move || {
            for id in 1..=n {
                assert!(write(&ring, id, 3), "record {id} dropped");
            }
        })
    };
    let prepared = ring.prepare_spare();
    let mut out = Vec::new();
    let mut seen = 0;
    let d1 = ring.drain(&mut out, usize::MAX, &mut seen);
    let reclaimed = ring.reclaim_spare();
    p.join().unwrap();
    let d2 = ring.drain(&mut out, usize::MAX, &mut seen);
    let reclaimed = ring.reclaim_spare() || reclaimed;
    if prepared && !reclaimed {
        SPARES_TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let (ids, lost) = decode(&out);
    check_order(&ids);
    assert_eq!(lost, 0);
    // (The consumer may drain in time for the ring not to grow.)
    assert_eq!(
        budget.used(),
        segment_bytes(ring.capacity_words()),
        "the outgrown segment and any unused spare are freed"
    );
    drop(ring);
    assert_eq!(budget.used(), 0, "every segment given back once");
    (ids, d1.overwritten + d2.overwritten)
}

/// Executions of `spare_while_growing` in which the producer took the spare
/// (outside the model: a plain counter across executions).
static SPARES_TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs the spare model and checks some execution grew into the spare.
fn model_spares(overwrite: bool, check: fn(Vec<u64>, u64)) {
    let before = SPARES_TAKEN.load(std::sync::atomic::Ordering::Relaxed);
    loom::model(move || {
        let (ids, overwritten) = spare_while_growing(overwrite, 3);
        check(ids, overwritten);
    });
    assert!(
        SPARES_TAKEN.load(std::sync::atomic::Ordering::Relaxed) > before,
        "no execution took the spare"
    );
}

#[test]
fn loom_tests_ring_grows_into_a_spare_made_meanwhile() {
    model_spares(false, |ids, overwritten| {
        assert_eq!(ids, vec![1, 2, 3]);
        assert_eq!(overwritten, 0);
    });
}

#[test]
fn loom_tests_overwrite_ring_grows_into_a_spare_made_meanwhile() {
    model_spares(true, |ids, overwritten| {
        assert_eq!(ids.last(), Some(&3));
        assert_eq!(ids.len() as u64 + overwritten, 3);
    });
}

/// Word 0 of a segment while someone owns it (see `own`).
const OWNED: u64 = u64::MAX;

/// Marks `base`'s segment as ours, checking no one else holds it, writes
/// over its words (whatever they held: a reused segment's stale ones) and
/// unmarks it: two owners at once would see each other's mark.
fn own(base: *mut crate::record::sync::AtomicU64, words: usize, who: u64) {
    use crate::record::sync::Ordering::Relaxed;
    // SAFETY: the caller owns the segment of `words` slots at `base` (taken
    // from the pool with its CAS, or just made): alive for this call.
    let slots = unsafe { std::slice::from_raw_parts(base, words) };
    assert_ne!(
        slots[0].swap(OWNED, Relaxed),
        OWNED,
        "a segment owned twice"
    );
    for (i, w) in slots.iter().enumerate().skip(1) {
        w.store(who * 100 + i as u64, Relaxed);
    }
    slots[0].store(who, Relaxed);
}

/// The pool's hand-over: two producers race with one CAS each for the
/// segments of one class (two slots) while the flusher puts a second one
/// in and then closes the pool (taking back what is left with a CAS too).
/// Each producer that wins writes its segment over (its stale words) and
/// gives it back (pooled again if the pool is open and has a slot, else
/// freed). Every segment has one owner at a time, and every byte goes back
/// to the budget exactly once.
#[test]
fn loom_tests_producers_race_for_pooled_segments_while_the_flusher_refills_and_closes() {
    use crate::record::segment::{alloc_mapped, free_mapped, PAGE};
    let words = PAGE / 8;
    let bytes = segment_bytes(words);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let budget = Budget::leaked(u64::MAX);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let segment = || {
            assert!(budget.try_take(bytes));
            alloc_mapped(words).unwrap()
        };
        assert!(pool.put(segment(), words));
        let producers: Vec<_> = (1..=2)
            .map(|who| {
                thread::spawn(move || {
                    let Some((base, got)) = pool.take(words, words) else {
                        return false;
                    };
                    assert_eq!(got, words);
                    own(base, got, who);
                    if !pool.put(base, got) {
                        // SAFETY: ours (taken above), not pooled, freed once.
                        unsafe { free_mapped(base, got) };
                        budget.give_back(bytes);
                    }
                    true
                })
            })
            .collect();
        // The flusher: a second segment for the class, then the stop.
        let second = segment();
        own(second, words, 3);
        if !pool.put(second, words) {
            // SAFETY: ours (made above), not pooled, freed once.
            unsafe { free_mapped(second, words) };
            budget.give_back(bytes);
        }
        pool.close();
        let took = producers.into_iter().map(|p| p.join().unwrap());
        if took.fold(false, |a, b| a | b) {
            POOLED_TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // A producer that gave its segment back while the pool closed
        // freed it itself (`put`'s fence), if `close` missed it.
        assert_eq!(pool.pooled_bytes(), 0, "a segment left in a closed pool");
        assert_eq!(budget.used(), 0, "every segment given back once");
    });
    assert!(
        POOLED_TAKEN.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no execution took a pooled segment"
    );
}

/// Executions in which a producer took a pooled segment.
static POOLED_TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `put` racing `close`: a thread gives a segment to the pool while the
/// session's end closes it. Whichever order their steps take (put loads
/// `open` before the close and its CAS lands after the close's scan), the
/// segment is freed once and nothing stays in the closed pool: either the
/// close's scan sees the word, or the put sees `open` false after its SeqCst
/// fence and takes the word back.
#[test]
fn loom_tests_a_segment_put_while_the_pool_closes_is_freed_once() {
    use crate::record::segment::{alloc_mapped, free_mapped, PAGE};
    let words = PAGE / 8;
    let bytes = segment_bytes(words);
    loom::model(move || {
        let budget = Budget::leaked(u64::MAX);
        let pool = budget.pool();
        pool.open(usize::MAX);
        assert!(budget.try_take(bytes));
        let base = alloc_mapped(words).unwrap() as usize;
        let putter = thread::spawn(move || {
            let base = base as *mut crate::record::sync::AtomicU64;
            if !pool.put(base, words) {
                // SAFETY: ours (made above), not pooled, freed once.
                unsafe { free_mapped(base, words) };
                budget.give_back(bytes);
            }
        });
        pool.close();
        putter.join().unwrap();
        assert_eq!(pool.pooled_bytes(), 0, "a segment left in a closed pool");
        assert_eq!(budget.used(), 0, "the segment given back once");
    });
}

/// Fills a segment with what a reused one holds: records of an earlier
/// ring that look whole (`[hdr(TEST, 3, 99), 99, 99002]`, repeated from
/// slot 0), which `decode` would take for record 99 if any came out.
fn fill_stale(base: *mut crate::record::sync::AtomicU64, words: usize) {
    use crate::record::sync::Ordering::Relaxed;
    // SAFETY: the caller owns the segment of `words` slots at `base` (just
    // made, not yet pooled): alive for this call.
    let slots = unsafe { std::slice::from_raw_parts(base, words) };
    let record = [make_header(KIND_TEST, 3, 99), 99, 99 * 1000 + 2];
    for (i, w) in slots.iter().enumerate() {
        w.store(record[i % 3], Relaxed);
    }
}

/// A ring of 8 words growing to 32 while its consumer makes a spare and a
/// third thread (a ring that gave its segment up) puts a 32-word segment
/// holding stale records into the pool: the producer's growth and the
/// consumer's `prepare_spare` both take from the pool, and race for its
/// word with the put (Release) and with each other (Acquire CASes); whoever
/// wins owns that segment, and whoever loses maps its own. Records arrive
/// whole and in order, none of the stale ones among them, and at the end the
/// pool and the ring give every byte back once.
#[test]
fn loom_tests_ring_grows_into_pooled_segments_while_the_consumer_takes_one_too() {
    use crate::record::segment::alloc_mapped;
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let budget = Budget::leaked(u64::MAX);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let ring = Arc::new(Ring::growable(8, 32, false, budget));
        let giver = thread::spawn(move || {
            assert!(budget.try_take(segment_bytes(32)));
            let base = alloc_mapped(32).unwrap();
            fill_stale(base, 32);
            assert!(pool.put(base, 32));
        });
        let p = {
            let ring = ring.clone();
            thread::spawn(move || {
                for id in 1..=4 {
                    assert!(write(&ring, id, 3), "record {id} dropped");
                }
            })
        };
        ring.prepare_spare();
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        p.join().unwrap();
        giver.join().unwrap();
        ring.drain(&mut out, usize::MAX, &mut seen);
        let (ids, lost) = decode(&out);
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(lost, 0);
        if pool.taken() > 0 {
            RING_POOLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        drop(ring);
        pool.close();
        assert_eq!(budget.used(), 0, "every segment given back once");
    });
    assert!(
        RING_POOLED.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no execution took the pooled segment"
    );
}

/// Executions of the ring + pool model in which the pooled segment was taken.
static RING_POOLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A ring made quiet while its producer writes: the consumer drains and
/// makes the ring quiet when it finds it empty (`Ring::quiet`), twice,
/// while the producer writes records 1 and 2 (3 words each, in 8: a record
/// takes the slow path only if the ring was made quiet before it) and then
/// exits (its retirement flag, then `announce`, as `ThreadRing::retire`). Whatever the
/// interleaving: a ring with records left is announced, or its fast path is
/// closed so that the next record announces it; and the exit always leaves
/// it announced, so the consumer visits it once more. Nothing is lost.
#[test]
fn loom_tests_a_quiet_ring_is_announced_by_its_next_record_or_its_exit() {
    // Four preemptions cover each race here (a quiet against a record, and
    // against the exit) and keep the model to seconds (unbounded, it ran
    // for over ten minutes).
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(4);
    builder.check(|| {
        let ring = Arc::new(Ring::with_words(8, false));
        let retired = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let p = {
            let (ring, retired) = (ring.clone(), retired.clone());
            thread::spawn(move || {
                assert!(write(&ring, 1, 3));
                assert!(write(&ring, 2, 3));
                retired.store(true, Ordering::Release);
                ring.announce();
            })
        };
        let mut out = Vec::new();
        let mut seen = 0;
        let mut quiet = false;
        for _ in 0..2 {
            ring.drain(&mut out, usize::MAX, &mut seen);
            quiet = ring.quiet(|| retired.load(Ordering::Relaxed));
            if !quiet {
                assert!(ring.is_announced(), "a ring not made quiet stays announced");
            }
        }
        p.join().unwrap();
        assert!(
            !quiet || !retired.load(Ordering::Relaxed) || ring.is_announced(),
            "the exit of a quiet ring's thread announces it"
        );
        assert!(
            ring.is_announced(),
            "after the exit, the ring is visited again"
        );
        ring.drain(&mut out, usize::MAX, &mut seen);
        assert_eq!(decode(&out).0, vec![1, 2]);
    });
}

/// As above without the exit: the producer writes two records while the
/// consumer drains and makes the ring quiet twice. A record the consumer
/// did not see may be left in a quiet ring (written while it was made
/// quiet), but then the producer's next record announces the ring.
#[test]
fn loom_tests_a_record_left_in_a_quiet_ring_is_announced_by_the_next() {
    loom::model(|| {
        let ring = Arc::new(Ring::with_words(8, false));
        let p = {
            let ring = ring.clone();
            thread::spawn(move || {
                assert!(write(&ring, 1, 3));
                assert!(write(&ring, 2, 3));
            })
        };
        let mut out = Vec::new();
        let mut seen = 0;
        for _ in 0..2 {
            ring.drain(&mut out, usize::MAX, &mut seen);
            ring.quiet(|| false);
        }
        p.join().unwrap();
        if ring.used_words() > 0 && !ring.is_announced() {
            // The thread records again (this thread, after the join, is
            // ordered after every store of the producer's).
            assert!(write(&ring, 3, 2));
            assert!(ring.is_announced(), "a record in a quiet ring announces it");
        }
        if ring.is_announced() {
            ring.drain(&mut out, usize::MAX, &mut seen);
        }
        let ids = decode(&out).0;
        assert!(ids.starts_with(&[1, 2]), "records lost: {ids:?}");
    });
}
