use super::*;

/// The flusher takes the rings listed since its last call, once each;
/// rings it removes leave the registry's list.
#[test]
fn the_flusher_takes_each_ring_added_once() {
    let reg = Registry::for_test();
    reg.open(
        7,
        RingConfig {
            bytes: 4096,
            budget_bytes: DEFAULT_BUDGET_BYTES,
            overwrite: false,
            thread_time: false,
        },
    );
    let seqs = |v: &[Arc<ThreadRing>]| v.iter().map(|r| r.seq_id).collect::<Vec<_>>();
    let a = reg.create(7, 1, 2, "a".into()).unwrap();
    let b = reg.create(7, 1, 3, "b".into()).unwrap();
    assert_eq!(
        (a.seq_id, b.seq_id),
        (FIRST_THREAD_SEQ, FIRST_THREAD_SEQ + 1)
    );
    let mut added = Vec::new();
    reg.take_added(&mut added);
    assert_eq!(seqs(&added), [a.seq_id, b.seq_id]);
    assert_eq!(Arc::strong_count(&a), 3, "ours, the list's, the flusher's");
    reg.take_added(&mut added);
    assert!(added.is_empty(), "each ring taken once");
    assert!(
        reg.create(6, 1, 4, "old".into()).is_none(),
        "not this session's"
    );
    let c = reg.create(7, 1, 4, "c".into()).unwrap();
    reg.take_added(&mut added);
    assert_eq!(seqs(&added), [c.seq_id]);
    reg.remove(&[a.seq_id, c.seq_id]);
    assert_eq!(seqs(&reg.state.lock().rings), [b.seq_id]);
    drop(added);
    assert_eq!(seqs(&reg.close()), [b.seq_id]);
    assert!(reg.create(7, 1, 5, "late".into()).is_none(), "closed");
}
