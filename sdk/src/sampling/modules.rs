//! The process's code: executable mappings from `/proc/self/maps`, each
//! file's ELF read once (build id, symbol table, unwind sections), and the
//! look-up of an address to (mapping, `rel_pc`, function name).
//!
//! Names come from `.symtab` (and `.dynsym` where it is stripped): an
//! address map built in milliseconds, never DWARF line tables (hundreds of
//! milliseconds for a few addresses). Demangled at look-up, once per frame.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::sync::Arc;

/// One executable mapping of a file.
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// File offset of `start`.
    pub(crate) pgoff: u64,
    pub(crate) path: String,
    pub(crate) file: Option<Arc<ElfFile>>,
}

impl Mapping {
    /// `pc` relative to the mapped file (what offline symbolizers take).
    pub(crate) fn rel_pc(&self, pc: u64) -> u64 {
        pc - self.start + self.pgoff
    }

    /// The ELF's address of `pc`.
    fn svma(&self, pc: u64) -> Option<u64> {
        let f = self.file.as_ref()?;
        Some(self.rel_pc(pc).wrapping_add(f.load_bias))
    }

    /// `svma - file offset` of the segment mapped here (Perfetto's
    /// `load_bias`).
    pub(crate) fn load_bias(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.load_bias)
    }
}

/// What is read from one ELF file.
pub(crate) struct ElfFile {
    pub(crate) build_id: Vec<u8>,
    /// Address minus file offset of the executable segment.
    pub(crate) load_bias: u64,
    /// (address, size, mangled name), sorted by address.
    symbols: Vec<(u64, u64, Box<str>)>,
    /// Unwind sections, for the copied-stack unwinder.
    pub(crate) unwind: UnwindSections,
    /// Of the functions looked at, the share that sets up a frame pointer.
    pub(crate) frame_pointer_share: f32,
}

/// Shared with the unwinder's module list, which is rebuilt when the
/// mappings change: the sections are read once, never copied again.
#[derive(Default)]
pub(crate) struct UnwindSections {
    pub(crate) eh_frame: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    pub(crate) eh_frame_hdr: Option<(std::ops::Range<u64>, Arc<[u8]>)>,
    pub(crate) text: Option<std::ops::Range<u64>>,
    pub(crate) got: Option<std::ops::Range<u64>>,
}

impl ElfFile {
    pub(crate) fn read(path: &str) -> Option<ElfFile> {
        let data = FileMap::open(path)?;
        let obj = object::File::parse(data.bytes()).ok()?;
        let build_id = obj.build_id().ok().flatten().unwrap_or_default().to_vec();
        // The executable segment's address minus its file offset.
        let load_bias = obj
            .segments()
            .find(|s| {
                obj.sections().any(|sec| {
                    sec.kind() == object::SectionKind::Text
                        && sec.address() >= s.address()
                        && sec.address() < s.address() + s.size()
                })
            })
            .map_or(0, |s| s.address().wrapping_sub(s.file_range().0));
        let mut symbols: Vec<(u64, u64, Box<str>)> = obj
            .symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.into())))
            .collect();
        symbols.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        symbols.dedup_by_key(|s| s.0);
        let section = |name: &str| {
            obj.section_by_name(name).and_then(|s| {
                let d = s.data().ok()?;
                Some((s.address()..s.address() + s.size(), Arc::from(d)))
            })
        };
        let range = |name: &str| {
            obj.section_by_name(name)
                .map(|s| s.address()..s.address() + s.size())
        };
        let unwind = UnwindSections {
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            text: range(".text"),
            got: range(".got"),
        };
        let frame_pointer_share = obj
            .section_by_name(".text")
            .and_then(|t| Some((t.address(), t.data().ok()?)))
            .map_or(0.0, |(addr, text)| {
                frame_pointer_share(&symbols, addr, text)
            });
        Some(ElfFile {
            build_id,
            load_bias,
            symbols,
            unwind,
            frame_pointer_share,
        })
    }

    /// The function containing ELF address `svma`, mangled.
    fn symbol(&self, svma: u64) -> Option<&str> {
        let i = self
            .symbols
            .partition_point(|s| s.0 <= svma)
            .checked_sub(1)?;
        let (addr, size, name) = &self.symbols[i];
        // A sized symbol must contain the address; an unsized one (some
        // assembly) is taken up to the next symbol.
        if *size > 0 && svma >= addr + size {
            return None;
        }
        Some(name)
    }
}

/// A file mapped read-only: only the pages of the sections read are
/// faulted in (a debug binary is tens of MB; its symbols a fraction).
struct FileMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl FileMap {
    fn open(path: &str) -> Option<FileMap> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).ok()?;
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh private read-only mapping of an open file of
        // `len` bytes; the kernel picks the address. The fd may be closed
        // afterwards (the mapping keeps the file).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(FileMap { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes are mapped readable at `ptr` until `drop`.
        // A file truncated meanwhile would fault on access: the process's
        // own binaries and libraries are not rewritten while it runs.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The share of (up to 512) functions of `text` at `addr` whose first
/// instructions are `push %rbp; mov %rsp,%rbp` (after an `endbr64`).
fn frame_pointer_share(symbols: &[(u64, u64, Box<str>)], addr: u64, text: &[u8]) -> f32 {
    const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let funcs: Vec<&[u8]> = symbols
        .iter()
        .filter(|s| s.1 >= 16 && s.0 >= addr)
        .filter_map(|s| text.get((s.0 - addr) as usize..(s.0 - addr) as usize + 8))
        .collect();
    if funcs.is_empty() {
        return 0.0;
    }
    let step = funcs.len().div_ceil(512);
    let (mut seen, mut with) = (0u32, 0u32);
    for f in funcs.iter().step_by(step) {
        seen += 1;
        let body = if f[..4] == ENDBR64 { &f[4..] } else { &f[..4] };
        with += (body[..4] == PROLOGUE) as u32;
    }
    with as f32 / seen as f32
}

/// Every executable mapping of the process, re-read when an address falls
/// outside them (a library loaded later), at most once a second.
#[derive(Default)]
pub(crate) struct Modules {
    /// Sorted by start.
    pub(crate) maps: Vec<Mapping>,
    files: HashMap<String, Option<Arc<ElfFile>>>,
    last_scan: Option<std::time::Instant>,
    /// Bumped whenever `maps` changes (the unwinder re-reads them).
    pub(crate) generation: u64,
}

impl Modules {
    /// Reads `/proc/self/maps` and every new file's ELF.
    pub(crate) fn scan(&mut self) {
        self.last_scan = Some(std::time::Instant::now());
        if let Ok(text) = std::fs::read_to_string("/proc/self/maps") {
            self.scan_text(&text);
        }
    }

    /// The executable mappings of `text`, in `/proc/<pid>/maps`'s form.
    pub(crate) fn scan_text(&mut self, text: &str) {
        let mut maps = Vec::new();
        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let (Some(range), Some(perms), Some(off)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let path = parts.nth(2).unwrap_or("");
            if !perms.contains('x') || !path.starts_with('/') {
                continue;
            }
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(pgoff)) = (
                u64::from_str_radix(a, 16),
                u64::from_str_radix(b, 16),
                u64::from_str_radix(off, 16),
            ) else {
                continue;
            };
            let file = self
                .files
                .entry(path.to_string())
                .or_insert_with(|| ElfFile::read(path).map(Arc::new))
                .clone();
            maps.push(Mapping {
                start,
                end,
                pgoff,
                path: path.to_string(),
                file,
            });
        }
        maps.sort_by_key(|m| m.start);
        // A rescan for an address outside every mapping (the vDSO, JIT
        // code) mostly finds the same mappings: the unwinder keeps its
        // module list and its rule cache then.
        let same = maps.len() == self.maps.len()
            && maps.iter().zip(&self.maps).all(|(a, b)| {
                (a.start, a.end, a.pgoff, &a.path) == (b.start, b.end, b.pgoff, &b.path)
            });
        self.maps = maps;
        if !same {
            self.generation += 1;
        }
    }

    /// The mapping holding `pc` (rescanning once a second if none does).
    pub(crate) fn find(&mut self, pc: u64) -> Option<usize> {
        if let Some(i) = self.lookup(pc) {
            return Some(i);
        }
        if self
            .last_scan
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1))
        {
            self.scan();
            return self.lookup(pc);
        }
        None
    }

    fn lookup(&self, pc: u64) -> Option<usize> {
        let i = self
            .maps
            .partition_point(|m| m.start <= pc)
            .checked_sub(1)?;
        (pc < self.maps[i].end).then_some(i)
    }

    /// Whether the program's own code keeps frame pointers (most of its
    /// functions set one up): then the kernel's call chains are whole.
    pub(crate) fn main_has_frame_pointers(&self) -> bool {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return false;
        };
        let exe = exe.to_string_lossy();
        self.maps
            .iter()
            .find(|m| m.path == exe)
            .and_then(|m| m.file.as_ref())
            .is_some_and(|f| f.frame_pointer_share >= 0.8)
    }

    /// The demangled name of the function at `pc` in mapping `map`.
    pub(crate) fn function_name(&self, map: usize, pc: u64) -> Option<String> {
        let m = &self.maps[map];
        let svma = m.svma(pc)?;
        let name = m.file.as_ref()?.symbol(svma)?;
        Some(format!("{:#}", rustc_demangle::demangle(name)))
    }
}

#[cfg(test)]
mod tests {
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
}
