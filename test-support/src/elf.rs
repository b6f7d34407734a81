//! A crafted, malformed ELF file: what the CPU sampler's ELF reader must
//! survive (the SDK's unit tests read it; a scenario maps it and runs its
//! code).

/// Where the malformed ELF's code lies in its file (and its `.text`).
pub const MALFORMED_CODE: usize = 0x100;

/// A malformed ELF (x86_64, ET_DYN) whose numbers overflow: a load segment
/// whose end passes 2^64 (before a sane one at the same address), a
/// `.text` whose size passes 2^64 and the file's end, an `.eh_frame` and a
/// `.got` whose ends pass 2^64, an `.eh_frame_hdr` past the file's end,
/// a function symbol whose end passes 2^64. At `MALFORMED_CODE`, a function
/// `extern "C" fn(u32)` that counts its argument down to zero.
pub fn malformed() -> Vec<u8> {
    const BASE: u64 = 0xffff_ffff_ffff_0000;
    let mut f = vec![0u8; 0x500];
    fn put(f: &mut [u8], at: usize, words: &[&[u8]]) {
        let bytes: Vec<u8> = words.concat();
        f[at..at + bytes.len()].copy_from_slice(&bytes);
    }
    let le64 = |w: u64| w.to_le_bytes();
    // ELF header: 64-bit, little-endian, ET_DYN, x86_64, program headers at
    // 0x40 (2), section headers at 0x300 (8, names in the 7th).
    put(&mut f, 0, &[&[0x7f, b'E', b'L', b'F', 2, 1, 1]]);
    put(
        &mut f,
        16,
        &[
            &3u16.to_le_bytes(),
            &62u16.to_le_bytes(),
            &1u32.to_le_bytes(),
            &le64(0),
            &le64(0x40),
            &le64(0x300),
            &0u32.to_le_bytes(),
            &[64, 0, 56, 0, 2, 0, 64, 0, 8, 0, 7, 0],
        ],
    );
    // PT_LOAD, R+X, the whole file at BASE: the first's size overflows.
    for (i, memsz) in [(0usize, 1u64 << 32), (1, 0x1000)] {
        let p: [&[u8]; 8] = [
            &1u32.to_le_bytes(),
            &5u32.to_le_bytes(),
            &le64(0),
            &le64(BASE),
            &le64(BASE),
            &le64(0x500),
            &le64(memsz),
            &le64(0x1000),
        ];
        put(&mut f, 0x40 + i * 56, &p);
    }
    // mov ecx, edi; 1: dec ecx; jnz 1b; ret
    put(
        &mut f,
        MALFORMED_CODE,
        &[&[0x89, 0xf9, 0xff, 0xc9, 0x75, 0xfc, 0xc3]],
    );
    // Symbols at 0x218 (null, `f` over the code with an overflowing size,
    // a sane `g`), their names at 0x260.
    for (i, (name, value, size)) in [
        (1u32, BASE + 0x100, 0xffff_0000u64),
        (3, BASE + 0x180, 0x20),
    ]
    .into_iter()
    .enumerate()
    {
        let sym: [&[u8]; 5] = [
            &name.to_le_bytes(),
            &[0x12, 0], // STB_GLOBAL, STT_FUNC
            &1u16.to_le_bytes(),
            &le64(value),
            &le64(size),
        ];
        put(&mut f, 0x218 + (i + 1) * 24, &sym);
    }
    put(&mut f, 0x260, &[b"\0f\0g\0"]);
    let names: &[u8] = b"\0.text\0.eh_frame\0.eh_frame_hdr\0.got\0.symtab\0.strtab\0.shstrtab\0";
    put(&mut f, 0x270, &[names]);
    let name = |n: &str| {
        let at = names
            .windows(n.len() + 2)
            .position(|w| w[0] == 0 && &w[1..=n.len()] == n.as_bytes() && w[n.len() + 1] == 0);
        at.unwrap() as u32 + 1
    };
    // (name, type, flags, addr, offset, size, link, info, entsize)
    let sections = [
        (
            ".text",
            1u32,
            6u64,
            BASE + 0x100,
            0x100u64,
            1u64 << 48,
            0u32,
            0u32,
            0u64,
        ),
        (".eh_frame", 1, 2, u64::MAX - 7, 0x200, 0x10, 0, 0, 0),
        (".eh_frame_hdr", 1, 2, 0x1000, 0x10_0000, 0x10, 0, 0, 0),
        (".got", 1, 3, u64::MAX, 0x210, 8, 0, 0, 0),
        (".symtab", 2, 0, 0, 0x218, 72, 6, 1, 24),
        (".strtab", 3, 0, 0, 0x260, 5, 0, 0, 0),
        (".shstrtab", 3, 0, 0, 0x270, names.len() as u64, 0, 0, 0),
    ];
    for (i, (n, kind, flags, addr, off, size, link, info, entsize)) in
        sections.into_iter().enumerate()
    {
        let sh: [&[u8]; 10] = [
            &name(n).to_le_bytes(),
            &kind.to_le_bytes(),
            &le64(flags),
            &le64(addr),
            &le64(off),
            &le64(size),
            &link.to_le_bytes(),
            &info.to_le_bytes(),
            &le64(1),
            &le64(entsize),
        ];
        put(&mut f, 0x300 + (i + 1) * 64, &sh);
    }
    f
}
