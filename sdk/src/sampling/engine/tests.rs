use super::*;

#[inline(never)]
fn a_function_to_sample() -> u64 {
    std::hint::black_box(3)
}

/// Without room the tables give the ids of stacks they hold and refuse
/// the others, adding nothing; with room a stack is stored once and
/// found again; the bytes they count grow with what they hold.
#[test]
fn tables_without_room_intern_only_known_stacks() {
    let mut modules = Modules::default();
    modules.scan();
    let mut tables = Tables::default();
    let mut scratch = Vec::new();
    let pc = a_function_to_sample as *const () as u64 + 1;
    let a = [pc, pc + 100, pc + 200];
    let b = [pc, pc + 300];
    assert_eq!(
        tables.callstack(&mut modules, &a, &mut scratch, false),
        None
    );
    assert_eq!(tables.bytes, 0);
    assert!(tables.frames.is_empty() && tables.callstacks.is_empty());
    let id = tables
        .callstack(&mut modules, &a, &mut scratch, true)
        .unwrap();
    let held = tables.bytes;
    assert!(held > 0);
    assert_eq!(
        tables.callstack(&mut modules, &a, &mut scratch, false),
        Some(id)
    );
    assert_eq!(
        tables.callstack(&mut modules, &b, &mut scratch, false),
        None
    );
    assert_eq!((tables.bytes, tables.callstacks.len()), (held, 1));
    assert_eq!(
        tables.callstack(&mut modules, &[], &mut scratch, false),
        Some(0)
    );
    let other = tables
        .callstack(&mut modules, &b, &mut scratch, true)
        .unwrap();
    assert_ne!(other, id);
    assert!(tables.bytes > held);
    // Each stack once: in `callstacks`, its map keyed by a hash.
    assert_eq!(tables.callstacks.len(), 2);
    assert_eq!(tables.stack_ids.len(), 2);
    assert_eq!(a_function_to_sample(), 3);
}

/// A call stack the flusher gave inlined frames (`name_frame`,
/// `expand`) is found again by the sampler under its id, without room
/// and without being stored twice, as is one made from a frame named
/// already; what naming adds counts in the tables' bytes.
#[test]
fn a_stack_given_its_inlined_frames_is_found_again_and_counted() {
    let mut modules = Modules::default();
    modules.scan();
    let mut tables = Tables::default();
    let (mut scratch, mut expanded) = (Vec::new(), Vec::new());
    let pc = a_function_to_sample as *const () as u64 + 1;
    let a = [pc, pc + 100, pc + 200];
    let id = tables
        .callstack(&mut modules, &a, &mut scratch, true)
        .unwrap();
    assert_eq!(tables.unexpanded, [id]);
    let frames = std::mem::take(&mut tables.unnamed);
    assert_eq!(frames.len(), 3);
    let before = tables.bytes;
    // The middle frame: `inner` inlined into `outer`.
    tables.name_frame(frames[1], vec!["inner".into(), "outer".into()]);
    for id in std::mem::take(&mut tables.unexpanded) {
        tables.expand(id, &mut expanded);
    }
    let stack = &tables.callstacks[id as usize - 1];
    assert_eq!(stack.len(), 4);
    let inner = stack[2];
    assert_eq!(
        tables.names[tables.frames[inner as usize - 1].name as usize - 1],
        "inner"
    );
    assert!(tables.bytes > before, "names, a frame and a longer stack");
    let held = (tables.bytes, tables.callstacks.len(), tables.frames.len());
    assert_eq!(
        tables.callstack(&mut modules, &a, &mut scratch, false),
        Some(id),
        "the expanded stack is found without room"
    );
    assert_eq!(
        tables.callstack(&mut modules, &a, &mut scratch, true),
        Some(id)
    );
    assert_eq!(
        (tables.bytes, tables.callstacks.len(), tables.frames.len()),
        held,
        "nothing stored again"
    );
    // A stack made after the naming holds the named frame: stored as
    // made, found again before and after its expansion.
    let b = [pc + 300, pc + 100, pc + 200];
    let other = tables
        .callstack(&mut modules, &b, &mut scratch, true)
        .unwrap();
    assert_ne!(other, id);
    assert_eq!(
        tables.callstack(&mut modules, &b, &mut scratch, false),
        Some(other)
    );
    for id in std::mem::take(&mut tables.unexpanded) {
        tables.expand(id, &mut expanded);
    }
    assert_eq!(tables.callstacks[other as usize - 1].len(), 4);
    assert_eq!(
        tables.callstack(&mut modules, &b, &mut scratch, false),
        Some(other)
    );
    assert_eq!(tables.callstacks.len(), 2);
    assert_eq!(tables.stack_ids.len(), 2);
}
