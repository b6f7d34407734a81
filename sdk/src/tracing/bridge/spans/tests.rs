use super::*;

fn entry(id: u64) -> Entered {
    Entered {
        id,
        session: 1,
        depth: id.is_multiple_of(2).then_some(id as u32),
    }
}

/// Past `STACK_INLINE` deep the stack spills and stays one stack:
/// innermost first, out-of-order takes, entries put back.
#[test]
fn the_stack_spills_past_its_inline_part_and_stays_in_order() {
    std::thread::spawn(|| {
        for id in 1..=20 {
            assert!(stack_has_room());
            assert!(push_entered(entry(id)));
        }
        assert_eq!(current_entered(), Some(20));
        // The innermost is spilled: the inline pop leaves it.
        assert!(pop_innermost(20).is_none());
        let (e, above) = take_entered(20).unwrap();
        assert_eq!((e.id, e.depth, above.len()), (20, Some(20), 0));
        assert_eq!(current_entered(), Some(19));
        // An entry below others, in the inline part.
        let (e, above) = take_entered(5).unwrap();
        assert_eq!((e.id, e.depth), (5, None));
        let ids: Vec<u64> = above.iter().map(|e| e.id).collect();
        assert_eq!(ids, (6..=19).collect::<Vec<_>>());
        assert_eq!(current_entered(), Some(4));
        extend_entered(above);
        assert_eq!(current_entered(), Some(19));
        for id in (17..=19).rev() {
            let (e, above) = take_entered(id).unwrap();
            assert_eq!((e.id, above.len()), (id, 0));
        }
        for id in (6..=16).rev() {
            let e = pop_innermost(id).unwrap();
            assert_eq!(e.depth, entry(id).depth);
        }
        for id in (1..=4).rev() {
            assert_eq!(pop_innermost(id).unwrap().id, id);
        }
        assert_eq!(current_entered(), None);
        assert!(take_entered(3).is_none());
    })
    .join()
    .unwrap();
}
