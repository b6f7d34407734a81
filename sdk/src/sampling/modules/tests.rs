use super::*;

#[inline(never)]
fn a_function_to_find() -> u64 {
    std::hint::black_box(7)
}

#[test]
fn our_own_function_is_found_by_address() {
    let mut m = Modules::default();
    m.scan();
    let pc = a_function_to_find as *const () as u64 + 1;
    let i = m.find(pc).expect("the test binary's text is mapped");
    let name = m.function_name(i, pc).expect("a symbol");
    assert!(name.ends_with("a_function_to_find"), "{name}");
    assert!(!m.maps[i].file.as_ref().unwrap().build_id.is_empty());
    assert_eq!(a_function_to_find(), 7);
}

#[test]
fn a_malformed_elf_gives_what_adds_up_and_no_panic() {
    let bytes = ringtrace_test_support::elf::malformed();
    // The crafted numbers are what the ELF reader sees.
    let obj = object::File::parse(&*bytes).unwrap();
    let addr = |n: &str| obj.section_by_name(n).map(|s| (s.address(), s.size()));
    assert_eq!(addr(".eh_frame"), Some((u64::MAX - 7, 0x10)));
    assert_eq!(addr(".got"), Some((u64::MAX, 8)));
    assert_eq!(addr(".text"), Some((0xffff_ffff_ffff_0100, 1 << 48)));
    assert!(obj.section_by_name(".eh_frame_hdr").is_some());
    assert_eq!(
        obj.segments().map(|s| s.size()).collect::<Vec<_>>(),
        [1 << 32, 0x1000]
    );
    assert_eq!(obj.symbols().count(), 2);
    let elf = ElfFile::parse(&bytes).expect("an ELF, however malformed");
    // The sane segment gives the load bias; the overflowing one is
    // skipped.
    assert_eq!(elf.load_bias, 0xffff_ffff_ffff_0000);
    // `f`'s end overflows: left out; `g` is kept and found.
    assert_eq!(elf.symbols.len(), 1);
    assert_eq!(elf.symbol(0xffff_ffff_ffff_0190), Some("g"));
    assert_eq!(elf.symbol(0xffff_ffff_ffff_0100), None);
    assert_eq!(elf.symbol(u64::MAX), None);
    // No section whose range overflows or whose bytes are not there.
    let u = &elf.unwind;
    assert!(u.eh_frame.is_none() && u.eh_frame_hdr.is_none());
    assert!(u.text.is_none() && u.got.is_none());
    assert_eq!(elf.frame_pointer_share, 0.0);
}

#[test]
fn a_symbol_whose_end_overflows_is_looked_up_without_panic() {
    let elf = ElfFile {
        build_id: Vec::new(),
        load_bias: 0,
        symbols: vec![(u64::MAX - 0x10, 0x100, "f".into())],
        dwarf: None,
        unwind: UnwindSections::default(),
        frame_pointer_share: 0.0,
    };
    assert_eq!(elf.symbol(u64::MAX - 1), Some("f"));
    assert_eq!(elf.symbol(1), None);
}

#[test]
fn functions_past_the_text_bytes_are_not_looked_at() {
    // A function at the top of the address space, `.text` at 0: its
    // offset in the text plus 8 overflows.
    let syms = [(u64::MAX - 3, 32, "f".into()), (0, 16, "g".into())];
    let mut text = vec![0u8; 64];
    text[..4].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5]);
    assert_eq!(frame_pointer_share(&syms, 0, &text), 1.0);
}

#[test]
fn a_mapping_below_its_offset_gives_a_relative_pc_without_panic() {
    let m = Mapping {
        start: 0x1000,
        end: 0x2000,
        pgoff: u64::MAX,
        path: "/x".into(),
        dev: 0,
        inode: 0,
        file: None,
    };
    assert_eq!(m.rel_pc(0x1001), 0);
}

#[test]
fn a_maps_line_keeps_its_paths_spaces_and_says_deleted() {
    let l = MapsLine::parse(
        "7f00a000-7f00b000 r-xp 00002000 fd:01 1234                       /tmp/a dir/lib z.so (deleted)",
    )
    .unwrap();
    assert_eq!(
        (l.start, l.end, l.pgoff, l.inode),
        (0x7f00a000, 0x7f00b000, 0x2000, 1234)
    );
    assert_eq!(l.dev, libc::makedev(0xfd, 1));
    assert_eq!(
        (l.path, l.deleted, l.perms),
        ("/tmp/a dir/lib z.so", true, "r-xp")
    );
    let anon = MapsLine::parse("7f00a000-7f00b000 rw-p 00000000 00:00 0 ").unwrap();
    assert_eq!((anon.path, anon.deleted), ("", false));
    for bad in [
        "",
        "zz-1 r-xp 0 fd:01 1 /x",
        "1-2 r-xp 0 fd01 1 /x",
        "1-2 r-xp 0 fd:01 x /x",
    ] {
        assert_eq!(MapsLine::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_fifo_or_another_file_at_a_mapped_path_is_not_read() {
    let dir = std::env::temp_dir().join(format!("ringtrace-maps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // No writer: a blocking open would never return.
    assert!(open_regular(fifo.to_str().unwrap()).is_none());
    let file = dir.join("lib.so");
    std::fs::write(&file, b"not the mapped file").unwrap();
    let (_, dev, ino) = open_regular(file.to_str().unwrap()).unwrap();
    let line = MapsLine {
        start: 1,
        end: 2,
        perms: "r-xp",
        pgoff: 0,
        dev,
        inode: ino + 1,
        path: file.to_str().unwrap(),
        deleted: true,
    };
    assert!(FileMap::open_mapped(&line).is_none(), "another inode");
    let line = MapsLine { inode: ino, ..line };
    assert!(FileMap::open_mapped(&line).is_some(), "the same inode");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_rescan_finding_the_same_mappings_keeps_the_unwinders_generation() {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut m = Modules::default();
    m.scan_text(&text);
    let first = m.generation;
    assert!(!m.maps.is_empty());
    m.scan_text(&text);
    assert_eq!(m.generation, first, "same mappings: nothing to rebuild");
    // One mapping fewer is a change.
    let fewer: String = text
        .lines()
        .filter(|l| !l.contains(&m.maps[0].path))
        .map(|l| format!("{l}\n"))
        .collect();
    m.scan_text(&fewer);
    assert_eq!(m.generation, first + 1);
}
