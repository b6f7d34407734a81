//! Names beyond a file's own symbol tables: the symbols of its separate
//! debug file and of its MiniDebugInfo, and the inlined frames of its DWARF.
//!
//! A system library usually ships with `.dynsym` only: the functions it
//! exports. Its internal functions (`_int_malloc`, `malloc_consolidate`...)
//! are named in:
//! - its debug file, found as GDB finds it: by build id
//!   (`/usr/lib/debug/.build-id/xx/yyyy.debug`, whose build id must match),
//!   else by `.gnu_debuglink` (a file name and the CRC-32 of that file,
//!   looked for beside the library, in its `.debug/` and under
//!   `/usr/lib/debug/<the library's directory>`; a CRC that differs is
//!   another build's file, not used). Debian's `*-dbg` and `*-dbgsym`
//!   packages install them;
//! - its `.gnu_debugdata` section (Fedora's MiniDebugInfo): an
//!   xz-compressed ELF whose `.symtab` holds the functions `.dynsym` does
//!   not (decoded by `lzma-rs`, at most [`MINI_CAP`] bytes).
//!
//! Only their `.symtab` is read (an address map built in milliseconds).
//! DWARF is read for inlined frames only, from the file's own sections or
//! its debug file's when they are not compressed, never copied: the
//! sections are read where the file is mapped, and `addr2line` parses a
//! unit's line program and functions the first time an address in it is
//! looked up (once per frame interned, on the flusher).
//!
//! Every number read from a file is untrusted: what does not add up is
//! left out, never a panic.

use super::modules::{ElfFile, FileMap, FilesCap, MapsLine};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Where debug files are installed.
pub(crate) const DEBUG_ROOT: &str = "/usr/lib/debug";

/// Most bytes a `.gnu_debugdata` may decompress to (they are a few hundred
/// KiB; more is no MiniDebugInfo).
pub(crate) const MINI_CAP: usize = 64 << 20;

/// Most bytes of DWARF sections (summed) a file's inlined frames are read
/// from. Mapped, not copied: this bounds what the page cache is asked for
/// and the units `addr2line` may parse, whose tables (one entry per unit,
/// then per function and line row of the units looked up) stay in memory
/// until the session ends (measured in BENCHMARKS.md).
pub(crate) const DWARF_CAP: u64 = 256 << 20;

/// A symbol: (address, size, mangled name).
pub(crate) type Symbol = (u64, u64, Box<str>);

/// The function symbols of `obj`'s `.symtab` and `.dynsym`: a symbol
/// whose end overflows is left out.
pub(crate) fn text_symbols(obj: &object::File<'_>, into: &mut Vec<Symbol>) {
    into.extend(
        obj.symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter(|s| s.address().checked_add(s.size()).is_some())
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.into()))),
    );
}

/// The symbols of `obj`'s `.gnu_debugdata` (an xz-compressed ELF), if it
/// has one that decodes.
pub(crate) fn mini_debuginfo_symbols(obj: &object::File<'_>, into: &mut Vec<Symbol>) {
    let Some(xz) = obj
        .section_by_name(".gnu_debugdata")
        .and_then(|s| s.data().ok())
    else {
        return;
    };
    let Some(elf) = unxz(xz, MINI_CAP) else {
        return;
    };
    if let Ok(inner) = object::File::parse(&*elf) {
        text_symbols(&inner, into);
    }
}

/// `xz` decoded, or None if it is no xz stream or decodes to more than
/// `cap` bytes.
pub(crate) fn unxz(xz: &[u8], cap: usize) -> Option<Vec<u8>> {
    let mut out = Capped {
        bytes: Vec::new(),
        cap,
    };
    let mut input = xz;
    lzma_rs::xz_decompress(&mut input, &mut out).ok()?;
    Some(out.bytes)
}

/// A `Write` into a vector that fails past `cap` bytes.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.cap {
            return Err(std::io::Error::other("decompresses past the cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The debug file of `build_id` under `root` (`.build-id/xx/yyyy.debug`).
pub(crate) fn by_build_id(root: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let path = root
        .join(".build-id")
        .join(format!("{first:02x}"))
        .join(format!("{hex}.debug"));
    path.is_file().then_some(path)
}

/// The debug file `.gnu_debuglink` names (`name`, its CRC-32 `crc`) for
/// the file at `path`: beside it, in its `.debug/`, or under `root` +
/// its directory; the first whose CRC matches.
pub(crate) fn by_debuglink(root: &Path, path: &Path, name: &[u8], crc: u32) -> Option<PathBuf> {
    let name = std::str::from_utf8(name).ok()?;
    // A bare file name: a link with a directory in it is not followed.
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let dir = path.parent()?;
    let under_root = root.join(dir.strip_prefix("/").unwrap_or(dir));
    [dir.to_path_buf(), dir.join(".debug"), under_root]
        .into_iter()
        .map(|d| d.join(name))
        .filter(|p| p != path)
        .find(|p| p.is_file() && crc_of(p) == Some(crc))
}

/// The CRC-32 of the file at `path` (the debuglink's).
fn crc_of(path: &Path) -> Option<u32> {
    let map = FileMap::open(path.to_str()?)?;
    let mut crc = flate2::Crc::new();
    crc.update(map.bytes());
    Some(crc.sum())
}

/// The debug file found for `path` (whose ELF is `obj`), its build id
/// checked: its symbols go into `into`; returns it mapped.
pub(crate) fn debug_file_symbols(
    root: &Path,
    path: &Path,
    obj: &object::File<'_>,
    into: &mut Vec<Symbol>,
) -> Option<Arc<FileMap>> {
    let build_id = obj.build_id().ok().flatten().filter(|b| !b.is_empty());
    let found = build_id.and_then(|b| by_build_id(root, b)).or_else(|| {
        let (name, crc) = obj.gnu_debuglink().ok().flatten()?;
        by_debuglink(root, path, name, crc)
    })?;
    let map = Arc::new(FileMap::open(found.to_str()?)?);
    let debug = object::File::parse(map.bytes()).ok()?;
    // A debug file of another build names other addresses.
    let theirs = debug.build_id().ok().flatten();
    if let (Some(ours), Some(theirs)) = (build_id, theirs) {
        if ours != theirs {
            return None;
        }
    }
    text_symbols(&debug, into);
    Some(map)
}

/// Names frames by file and address (the flusher's): each file read once
/// (by device and inode: the file that was mapped, never another found at
/// its path since), with its debug file's symbols and its DWARF, what it
/// holds counted within `modules::FILES_CAP`.
pub(crate) struct Symbolizer {
    files: std::collections::HashMap<(u64, u64), Option<ElfFile>>,
    cap: Arc<FilesCap>,
}

impl Symbolizer {
    /// Holding its files within `cap` (shared with the sampler's).
    pub(crate) fn new(cap: Arc<FilesCap>) -> Symbolizer {
        Symbolizer {
            files: Default::default(),
            cap,
        }
    }

    /// The names of the frames at ELF address `svma` of the file mapped
    /// as `line` says, innermost first (`ElfFile::frame_names`); `out` is
    /// left empty if that file cannot be read, its build id is not
    /// `build_id` (the one the sampler read from the mapping; empty: not
    /// compared), or its tables would pass the cap.
    pub(crate) fn frame_names(
        &mut self,
        line: &MapsLine<'_>,
        build_id: &[u8],
        svma: u64,
        out: &mut Vec<String>,
    ) {
        out.clear();
        if !line.path.starts_with('/') || (line.dev, line.inode) == (0, 0) {
            return;
        }
        let cap = &self.cap;
        let file = self.files.entry((line.dev, line.inode)).or_insert_with(|| {
            let mut f = ElfFile::read_mapped_with(line, Path::new(DEBUG_ROOT))?;
            if !build_id.is_empty() && f.build_id != build_id {
                return None;
            }
            if !cap.hold(f.heap_bytes()) {
                return None;
            }
            let dwarf = f.dwarf_bytes();
            if dwarf > 0 && !cap.hold(dwarf) {
                f.forget_dwarf();
            }
            Some(f)
        });
        if let Some(f) = file {
            f.frame_names(svma, out);
        }
    }
}

/// A section of a mapped file, as `gimli` reads it.
#[derive(Clone)]
pub(crate) struct Section {
    map: Arc<FileMap>,
    range: std::ops::Range<usize>,
}

impl std::fmt::Debug for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Section({:?})", self.range)
    }
}

impl std::ops::Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // The range was checked against the mapping when it was made.
        self.map.bytes().get(self.range.clone()).unwrap_or(&[])
    }
}

// SAFETY: the bytes `deref` returns are in the file's mapping, which
// `FileMap` never moves or changes and unmaps only when its last `Arc` is
// dropped: moving a `Section` leaves them where they are, and every clone
// (the same `Arc`, the same range) derefs to the same address.
unsafe impl stable_deref_trait::StableDeref for Section {}
// SAFETY: as above: a clone shares the mapping and the range.
unsafe impl stable_deref_trait::CloneStableDeref for Section {}

type Reader = gimli::EndianReader<gimli::RunTimeEndian, Section>;

/// A file's DWARF, read for inlined frames the first time one is asked for.
pub(crate) struct Dwarf {
    map: Arc<FileMap>,
    /// Bytes of its `.debug_info` and `.debug_line`.
    lines: u64,
    context: OnceLock<Option<addr2line::Context<Reader>>>,
}

impl Dwarf {
    /// The DWARF of the mapped ELF `map`, if it has line tables that are
    /// not compressed and within [`DWARF_CAP`].
    pub(crate) fn of(map: Arc<FileMap>) -> Option<Dwarf> {
        let obj = object::File::parse(map.bytes()).ok()?;
        let mut total = 0u64;
        for name in [".debug_info", ".debug_line"] {
            let s = obj.section_by_name(name)?;
            let r = s.compressed_file_range().ok()?;
            if r.format != object::CompressionFormat::None {
                return None;
            }
            total = total.saturating_add(r.uncompressed_size);
        }
        let rest: u64 = obj
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")))
            .map(|s| s.size())
            .fold(0, u64::saturating_add);
        (total.max(rest) <= DWARF_CAP).then(|| Dwarf {
            map,
            lines: total,
            context: OnceLock::new(),
        })
    }

    /// The most heap its tables take once every unit is parsed: about 3
    /// times its `.debug_info` and `.debug_line` (measured in
    /// BENCHMARKS.md, "Symbols"), counted against `modules::FILES_CAP`
    /// when the file is read (units are parsed as addresses in them are
    /// named, so most programs hold a fraction).
    pub(crate) fn heap_bound(&self) -> u64 {
        self.lines.saturating_mul(3)
    }

    fn context(&self) -> Option<&addr2line::Context<Reader>> {
        self.context.get_or_init(|| self.load()).as_ref()
    }

    fn load(&self) -> Option<addr2line::Context<Reader>> {
        let obj = object::File::parse(self.map.bytes()).ok()?;
        let endian = if obj.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let len = self.map.bytes().len();
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
            // A section absent, compressed, or not within the file: empty.
            let range = obj
                .section_by_name(id.name())
                .and_then(|s| {
                    let r = s.compressed_file_range().ok()?;
                    if r.format != object::CompressionFormat::None {
                        return None;
                    }
                    let start = usize::try_from(r.offset).ok()?;
                    let end = start.checked_add(usize::try_from(r.uncompressed_size).ok()?)?;
                    (end <= len).then_some(start..end)
                })
                .unwrap_or(0..0);
            let section = Section {
                map: self.map.clone(),
                range,
            };
            Ok(gimli::EndianReader::new(section, endian))
        })
        .ok()?;
        addr2line::Context::from_dwarf(dwarf).ok()
    }

    /// The functions inlined at ELF address `svma`, innermost first, the
    /// function they are inlined into left out (the symbol table names
    /// it), each mangled as DWARF names it (`out` is cleared first).
    pub(crate) fn inlined(&self, svma: u64, out: &mut Vec<String>) {
        out.clear();
        let Some(ctx) = self.context() else {
            return;
        };
        let Ok(mut frames) = ctx.find_frames(svma).skip_all_loads() else {
            return;
        };
        while let Ok(Some(frame)) = frames.next() {
            let name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map_or_else(String::new, |n| n.into_owned());
            out.push(name);
        }
        // The last is the function the others are inlined into.
        out.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::super::modules::Modules;
    use super::*;

    /// The path of the C library this test runs with.
    fn libc_path() -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| l.split_ascii_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .expect("the C library is mapped")
            .to_string()
    }

    /// `_int_malloc`'s address in the C library, from its debug file
    /// (Debian's `libc6-dbg`: `scripts/test.sh` installs it).
    fn int_malloc(libc: &str) -> u64 {
        let map = FileMap::open(libc).unwrap();
        let obj = object::File::parse(map.bytes()).unwrap();
        let id = obj
            .build_id()
            .unwrap()
            .expect("the C library has a build id");
        let debug = by_build_id(Path::new(DEBUG_ROOT), id).unwrap_or_else(|| {
            panic!("no debug file for {libc} under {DEBUG_ROOT}: install libc6-dbg")
        });
        let map = FileMap::open(debug.to_str().unwrap()).unwrap();
        let obj = object::File::parse(map.bytes()).unwrap();
        let mut syms = Vec::new();
        text_symbols(&obj, &mut syms);
        syms.iter()
            .find(|s| &*s.2 == "_int_malloc")
            .expect("_int_malloc in the debug file")
            .0
    }

    #[test]
    fn the_c_librarys_internal_functions_are_named_from_its_debug_file() {
        let libc = libc_path();
        let at = int_malloc(&libc) + 4;
        let elf = ElfFile::read_with(&libc, Path::new(DEBUG_ROOT)).unwrap();
        assert_eq!(elf.symbol_at(at), Some("_int_malloc"));
        // The sampler's read (unwinding) does not look for it.
        assert_ne!(
            ElfFile::read(&libc).unwrap().symbol_at(at),
            Some("_int_malloc")
        );
        // Its own tables do not name it.
        let own = ElfFile::read_with(&libc, Path::new("/nonexistent")).unwrap();
        assert_ne!(own.symbol_at(at), Some("_int_malloc"));
    }

    /// A debug directory of our own: the debug file under the library's
    /// directory, found by `.gnu_debuglink`; with one byte changed, its
    /// CRC differs and it is not used.
    #[test]
    fn a_debuglink_is_followed_only_to_a_file_whose_crc_matches() {
        let libc = libc_path();
        let at = int_malloc(&libc) + 4;
        let map = FileMap::open(&libc).unwrap();
        let obj = object::File::parse(map.bytes()).unwrap();
        let (name, _) = obj.gnu_debuglink().unwrap().expect("a debuglink");
        let name = std::str::from_utf8(name).unwrap();
        let id = obj.build_id().unwrap().unwrap();
        let real = by_build_id(Path::new(DEBUG_ROOT), id).unwrap();
        let root = std::env::temp_dir().join(format!("ringtrace-debuglink-{}", std::process::id()));
        let dir = Path::new(&libc).parent().unwrap();
        let under = root.join(dir.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&under).unwrap();
        let mut bytes = std::fs::read(&real).unwrap();
        std::fs::write(under.join(name), &bytes).unwrap();
        let elf = ElfFile::read_with(&libc, &root).unwrap();
        assert_eq!(elf.symbol_at(at), Some("_int_malloc"));
        // One byte of the file's end (its section headers' padding or
        // names) changed: another file as far as the CRC goes.
        let last = bytes.len() - 1;
        bytes[last] ^= 0x55;
        std::fs::write(under.join(name), &bytes).unwrap();
        let elf = ElfFile::read_with(&libc, &root).unwrap();
        assert_ne!(elf.symbol_at(at), Some("_int_malloc"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// MiniDebugInfo as Fedora makes it: an xz-compressed ELF holding a
    /// `.symtab` (here the C library's debug file), added to a copy of the
    /// library as `.gnu_debugdata` with `objcopy`: its symbols name the
    /// internal functions with no debug file to be found.
    #[test]
    fn gnu_debugdata_names_the_functions_dynsym_does_not() {
        let libc = libc_path();
        let at = int_malloc(&libc) + 4;
        let map = FileMap::open(&libc).unwrap();
        let obj = object::File::parse(map.bytes()).unwrap();
        let real = by_build_id(Path::new(DEBUG_ROOT), obj.build_id().unwrap().unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!("ringtrace-mini-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = std::fs::read(&real).unwrap();
        let mut xz = Vec::new();
        lzma_rs::xz_compress(&mut &plain[..], &mut xz).unwrap();
        assert_eq!(unxz(&xz, MINI_CAP).as_deref(), Some(&plain[..]));
        assert_eq!(unxz(&xz, plain.len() - 1), None, "past the cap");
        assert_eq!(unxz(b"not xz", MINI_CAP), None);
        std::fs::write(dir.join("mini.xz"), &xz).unwrap();
        let out = dir.join("libc-mini.so");
        let status = std::process::Command::new("objcopy")
            .arg(format!(
                "--add-section=.gnu_debugdata={}",
                dir.join("mini.xz").display()
            ))
            .arg(&libc)
            .arg(&out)
            .status()
            .expect("objcopy (binutils) runs");
        assert!(status.success());
        let elf = ElfFile::read_with(out.to_str().unwrap(), Path::new("/nonexistent")).unwrap();
        assert_eq!(elf.symbol_at(at), Some("_int_malloc"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Always inlined: its code is in `calls_an_inlined_function`.
    #[inline(always)]
    fn an_inlined_function(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(31)
    }

    #[inline(never)]
    fn calls_an_inlined_function(x: u64) -> u64 {
        an_inlined_function(x) ^ 1
    }

    /// This test program's DWARF (a debug build's) names the inlined
    /// function at one of its caller's addresses, innermost first, its
    /// caller next.
    #[test]
    fn an_inlined_function_is_a_frame_of_its_own_before_its_caller() {
        assert_eq!(calls_an_inlined_function(2), 63);
        let mut m = Modules::default();
        m.scan();
        let start = calls_an_inlined_function as *const () as u64;
        let i = m.find(start).expect("our text is mapped");
        let map = &m.maps[i];
        let mut sym = Symbolizer::new(Arc::default());
        let mut names = Vec::new();
        let mut frame_names = |pc: u64, names: &mut Vec<String>| {
            let svma = map.rel_pc(pc).wrapping_add(map.load_bias());
            sym.frame_names(&map.maps_line(), &[], svma, names);
        };
        // Innermost first: what the inlined function inlined itself
        // (`black_box`, in an optimized build), then it, then its caller.
        let mut seen = Vec::new();
        let found = (start..start + 64).any(|pc| {
            frame_names(pc, &mut names);
            seen.push(names.clone());
            let n = names.len();
            n >= 2
                && names[n - 2].ends_with("tests::an_inlined_function")
                && names[n - 1].ends_with("tests::calls_an_inlined_function")
        });
        assert!(found, "no address names the inlined function: {seen:?}");
        // Its entry is the caller's own code.
        assert!(seen[0]
            .last()
            .unwrap()
            .ends_with("tests::calls_an_inlined_function"));
    }
}

/// The cost of symbolizing (BENCHMARKS.md, "Symbols"): run with
/// `cargo test --release -p ringtrace --features cpu-sampling --lib
/// symbolization_cost -- --ignored --nocapture`.
#[cfg(test)]
mod cost {
    use super::super::modules::{ElfFile, Modules};
    use super::Symbolizer;
    use std::time::Instant;

    /// Anonymous and file-backed resident memory (KiB).
    fn rss() -> (u64, u64) {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib = |key: &str| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (kib("RssAnon:"), kib("RssFile:"))
    }

    #[test]
    #[ignore]
    fn symbolization_cost() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_ascii_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .unwrap()
            .to_string();
        for (what, root) in [
            ("own tables", "/nonexistent"),
            ("+ debug file", "/usr/lib/debug"),
        ] {
            let (a0, f0) = rss();
            let t = Instant::now();
            let elf = ElfFile::read_with(&libc, std::path::Path::new(root)).unwrap();
            let took = t.elapsed();
            let (a1, f1) = rss();
            println!(
                "libc {what}: {} symbols, read in {took:?}, anon +{} KiB, file +{} KiB",
                elf.symbol_count(),
                a1 - a0,
                f1.saturating_sub(f0)
            );
        }
        // This test program's DWARF: every function's first 64 bytes
        // looked up, as frames interned would be.
        let (a0, _) = rss();
        let t = Instant::now();
        let mut m = Modules::default();
        m.scan();
        let scanned = t.elapsed();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let i = m
            .maps
            .iter()
            .position(|x| std::path::Path::new(&x.path) == exe)
            .unwrap();
        let base = m.maps[i].start;
        let (a1, _) = rss();
        let mut names = Vec::new();
        let mut sym = Symbolizer::new(std::sync::Arc::default());
        let map = &m.maps[i];
        let pcs: Vec<u64> = (0..20_000u64)
            .map(|k| base + k * 97)
            .filter(|&pc| pc < m.maps[i].end)
            .collect();
        let t = Instant::now();
        let mut inlined = 0;
        for &pc in &pcs {
            let svma = map.rel_pc(pc).wrapping_add(map.load_bias());
            sym.frame_names(&map.maps_line(), &[], svma, &mut names);
            inlined += names.len().saturating_sub(1);
        }
        let looked = t.elapsed();
        let (a2, _) = rss();
        println!(
            "scan of every mapping (symbols, debug files): {scanned:?}, anon +{} KiB",
            a1 - a0
        );
        println!(
            "{} pcs of the test program looked up (DWARF, {inlined} inlined frames): {looked:?} \
             ({:?} per pc), anon +{} KiB",
            pcs.len(),
            looked / pcs.len() as u32,
            a2 - a1
        );
    }
}
