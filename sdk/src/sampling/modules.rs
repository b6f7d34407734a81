//! The process's code: executable mappings from `/proc/self/maps`, each
//! file's ELF read once (build id, symbol table, unwind sections), and the
//! look-up of an address to (mapping, `rel_pc`, function name).
//!
//! Names come from `.symtab` and `.dynsym`, with those of the file's debug
//! file and `.gnu_debugdata` where it has them (`debuginfo`): an address
//! map built in milliseconds. Where the file has DWARF, the functions
//! inlined at an address are named too, each a frame of its own (read the
//! first time an address of a unit is looked up). Demangled at look-up,
//! once per frame.
//!
//! Every number read from a file (addresses, sizes, offsets) is untrusted:
//! a span that overflows, or data that does not match its header, is left
//! out (a symbol, a section, a segment), never a panic.

use super::debuginfo::{self, Dwarf, Symbol};
use object::{Object, ObjectSection, ObjectSegment};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One executable mapping of a file.
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// File offset of `start`.
    pub(crate) pgoff: u64,
    pub(crate) path: String,
    /// The mapped file's device and inode (`MapsLine`).
    pub(crate) dev: u64,
    pub(crate) inode: u64,
    pub(crate) file: Option<Arc<ElfFile>>,
}

impl Mapping {
    /// `pc` relative to the mapped file (what offline symbolizers take).
    pub(crate) fn rel_pc(&self, pc: u64) -> u64 {
        pc.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }

    /// The ELF's address of `pc` (tests: the flusher names frames by
    /// `rel_pc` and `load_bias`).
    #[cfg(test)]
    fn svma(&self, pc: u64) -> Option<u64> {
        let f = self.file.as_ref()?;
        Some(self.rel_pc(pc).wrapping_add(f.load_bias))
    }

    /// The line of `/proc/self/maps` it was read from (tests).
    #[cfg(test)]
    pub(crate) fn maps_line(&self) -> MapsLine<'_> {
        MapsLine::executable(
            self.start, self.end, self.pgoff, self.dev, self.inode, &self.path,
        )
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
    /// (address, size, mangled name), sorted by address: the file's own,
    /// its `.gnu_debugdata`'s and its debug file's.
    symbols: Vec<Symbol>,
    /// Its DWARF (or its debug file's), for inlined frames.
    dwarf: Option<Dwarf>,
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

/// `start..start + size`, or None if that overflows (a malformed file).
fn span(start: u64, size: u64) -> Option<std::ops::Range<u64>> {
    Some(start..start.checked_add(size)?)
}

impl ElfFile {
    /// The file mapped at `line`'s addresses, as it was mapped (see
    /// [`FileMap::open_mapped`]): its own symbols and unwind sections
    /// (what the sampler reads).
    fn read_mapped(line: &MapsLine<'_>) -> Option<ElfFile> {
        let data = FileMap::open_mapped(line)?;
        Self::parse(data.bytes())
    }

    /// The ELF at `path` (tests: the sampler and the flusher read the
    /// file mapped, `read_mapped`, `read_mapped_with`).
    #[cfg(test)]
    pub(crate) fn read(path: &str) -> Option<ElfFile> {
        let data = FileMap::open(path)?;
        Self::parse(data.bytes())
    }

    /// The file mapped at `line`'s addresses, as it was mapped (never
    /// another file at its path now), for naming frames: with the symbols
    /// of its debug file, looked for under `debug_root` (`/usr/lib/debug`)
    /// by its build id or debuglink, and its DWARF (or its debug file's).
    pub(crate) fn read_mapped_with(
        line: &MapsLine<'_>,
        debug_root: &std::path::Path,
    ) -> Option<ElfFile> {
        let data = Arc::new(FileMap::open_mapped(line)?);
        Self::read_from(data, line.path, debug_root)
    }

    /// The ELF at `path` for naming frames (tests; see `read_mapped_with`).
    #[cfg(test)]
    pub(crate) fn read_with(path: &str, debug_root: &std::path::Path) -> Option<ElfFile> {
        Self::read_from(Arc::new(FileMap::open(path)?), path, debug_root)
    }

    /// The ELF `data` (found at `path`) for naming frames: its unwind
    /// sections left out (the sampler has its own), the symbols of its
    /// debug file added, its DWARF (or its debug file's) attached.
    fn read_from(data: Arc<FileMap>, path: &str, debug_root: &std::path::Path) -> Option<ElfFile> {
        let mut elf = Self::parse(data.bytes())?;
        elf.unwind = UnwindSections::default();
        let obj = object::File::parse(data.bytes()).ok()?;
        let mut more = Vec::new();
        let debug =
            debuginfo::debug_file_symbols(debug_root, std::path::Path::new(path), &obj, &mut more);
        if !more.is_empty() {
            elf.symbols.append(&mut more);
            sort_symbols(&mut elf.symbols);
        }
        elf.dwarf = Dwarf::of(data.clone()).or_else(|| debug.and_then(Dwarf::of));
        Some(elf)
    }

    /// What is read from the ELF `bytes`; None if they are no ELF (or no
    /// object file at all). Parts whose numbers do not add up are left out.
    fn parse(bytes: &[u8]) -> Option<ElfFile> {
        let obj = object::File::parse(bytes).ok()?;
        let build_id = obj.build_id().ok().flatten().unwrap_or_default().to_vec();
        // The executable segment's address minus its file offset.
        let load_bias = obj
            .segments()
            .find(|s| {
                let Some(seg) = span(s.address(), s.size()) else {
                    return false;
                };
                obj.sections().any(|sec| {
                    sec.kind() == object::SectionKind::Text && seg.contains(&sec.address())
                })
            })
            .map_or(0, |s| s.address().wrapping_sub(s.file_range().0));
        // A symbol whose end overflows is no function of a sane file.
        let mut symbols = Vec::new();
        debuginfo::text_symbols(&obj, &mut symbols);
        debuginfo::mini_debuginfo_symbols(&obj, &mut symbols);
        sort_symbols(&mut symbols);
        // A section's address range, and its bytes where the unwinder reads
        // them: left out if the range overflows or the bytes in the file
        // are not as many as the header says.
        let section = |name: &str| {
            obj.section_by_name(name).and_then(|s| {
                let d = s.data().ok()?;
                if d.len() as u64 != s.size() {
                    return None;
                }
                Some((span(s.address(), s.size())?, Arc::from(d)))
            })
        };
        let range = |name: &str| {
            obj.section_by_name(name)
                .and_then(|s| span(s.address(), s.size()))
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
            dwarf: None,
            unwind,
            frame_pointer_share,
        })
    }

    /// The names of the frames at ELF address `svma`, demangled,
    /// innermost first: the functions inlined there (where the file has
    /// DWARF), then the function of the symbol table they are inlined
    /// into ("" if none names it). `out` is cleared first.
    pub(crate) fn frame_names(&self, svma: u64, out: &mut Vec<String>) {
        out.clear();
        if let Some(dwarf) = &self.dwarf {
            dwarf.inlined(svma, out);
            out.retain(|n| !n.is_empty());
            for n in out.iter_mut() {
                *n = format!("{:#}", rustc_demangle::demangle(n));
            }
        }
        out.push(
            self.symbol(svma)
                .map(|n| format!("{:#}", rustc_demangle::demangle(n)))
                .unwrap_or_default(),
        );
    }

    /// How many function symbols were read (tests).
    #[cfg(test)]
    pub(crate) fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// The function containing ELF address `svma`, mangled (tests).
    #[cfg(test)]
    pub(crate) fn symbol_at(&self, svma: u64) -> Option<&str> {
        self.symbol(svma)
    }

    /// The heap it holds: symbols (their names copied out of the file),
    /// unwind sections, build id (its DWARF's: `dwarf_bytes`).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let names: u64 = self.symbols.iter().map(|s| s.2.len() as u64).sum();
        let section = |s: &Option<(std::ops::Range<u64>, Arc<[u8]>)>| {
            s.as_ref().map_or(0, |(_, d)| d.len() as u64 + 16)
        };
        self.symbols.capacity() as u64 * std::mem::size_of::<(u64, u64, Box<str>)>() as u64
            + names
            + section(&self.unwind.eh_frame)
            + section(&self.unwind.eh_frame_hdr)
            + self.build_id.len() as u64
    }

    /// The most heap its DWARF's tables may take (`Dwarf::heap_bound`);
    /// 0 without DWARF.
    pub(crate) fn dwarf_bytes(&self) -> u64 {
        self.dwarf.as_ref().map_or(0, Dwarf::heap_bound)
    }

    /// Its DWARF left unread (no room for its tables): its frames are
    /// named from its symbols only.
    pub(crate) fn forget_dwarf(&mut self) {
        self.dwarf = None;
    }

    /// The function containing ELF address `svma`, mangled.
    fn symbol(&self, svma: u64) -> Option<&str> {
        let i = self
            .symbols
            .partition_point(|s| s.0 <= svma)
            .checked_sub(1)?;
        let (addr, size, name) = self.symbols.get(i)?;
        // A sized symbol must contain the address; an unsized one (some
        // assembly) is taken up to the next symbol. `svma >= addr` here.
        if *size > 0 && svma - addr >= *size {
            return None;
        }
        Some(name)
    }
}

/// Sorted by address, one per address (the one of the largest size).
fn sort_symbols(symbols: &mut Vec<Symbol>) {
    symbols.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    symbols.dedup_by_key(|s| s.0);
}

/// A file mapped read-only: only the pages of the sections read are
/// faulted in (a debug binary is tens of MB; its symbols a fraction).
pub(crate) struct FileMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl FileMap {
    /// The file at `path` (a debug file), if it is a regular file.
    pub(crate) fn open(path: &str) -> Option<FileMap> {
        Self::map(open_regular(path)?.0)
    }

    /// The file mapped at `line`'s addresses, never another one found at
    /// its path now (a library replaced on disk since it was mapped, shown
    /// `(deleted)`): first `/proc/self/map_files/<start>-<end>`, the mapped
    /// file itself (opening it needs `CAP_SYS_ADMIN` or
    /// `CAP_CHECKPOINT_RESTORE`); else the path, if the file there is the
    /// one mapped (the device and inode of the maps line). Only a regular
    /// file is read: the opens do not block (a FIFO put at the path), and a
    /// file of another kind is left.
    fn open_mapped(line: &MapsLine<'_>) -> Option<FileMap> {
        let by_mapping = format!("/proc/self/map_files/{:x}-{:x}", line.start, line.end);
        if let Some((file, _, _)) = open_regular(&by_mapping) {
            return Self::map(file);
        }
        let (file, dev, ino) = open_regular(line.path)?;
        (dev == line.dev && ino == line.inode).then(|| Self::map(file))?
    }

    /// Maps `file` whole, read-only.
    fn map(file: std::fs::File) -> Option<FileMap> {
        use std::os::fd::AsRawFd;
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

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes are mapped readable at `ptr` until `drop`.
        // A file truncated meanwhile would fault on access: the process's
        // own binaries and libraries are not rewritten while it runs.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

// SAFETY: the mapping is private and read-only: nothing writes its bytes
// (`bytes` hands out shared slices only), so threads may read them at
// once; it is unmapped only by `drop`, which has the `FileMap` to itself.
unsafe impl Send for FileMap {}
// SAFETY: as above: shared access is reads of bytes nothing changes.
unsafe impl Sync for FileMap {}

/// `path` opened for reading without blocking (a FIFO would wait for a
/// writer) and kept only if it is a regular file: the file, its device and
/// inode.
fn open_regular(path: &str) -> Option<(std::fs::File, u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let kind = meta.file_type();
    if !kind.is_file() || kind.is_fifo() {
        return None;
    }
    Some((file, meta.dev(), meta.ino()))
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MapsLine<'a> {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) perms: &'a str,
    pub(crate) pgoff: u64,
    /// The device as `stat` gives it (`st_dev`).
    pub(crate) dev: u64,
    pub(crate) inode: u64,
    /// The path, spaces kept, without the kernel's ` (deleted)`.
    pub(crate) path: &'a str,
    /// The file was deleted or replaced since it was mapped.
    pub(crate) deleted: bool,
}

impl<'a> MapsLine<'a> {
    /// The line of an executable mapping (`r-xp`, not deleted), as a
    /// mapping kept from an earlier read is shown again.
    pub(crate) fn executable(
        start: u64,
        end: u64,
        pgoff: u64,
        dev: u64,
        inode: u64,
        path: &'a str,
    ) -> MapsLine<'a> {
        MapsLine {
            start,
            end,
            perms: "r-xp",
            pgoff,
            dev,
            inode,
            path,
            deleted: false,
        }
    }

    /// `line` parsed; None if it is not in the form the kernel writes.
    pub(crate) fn parse(line: &'a str) -> Option<MapsLine<'a>> {
        // Five fields separated by single spaces, then spaces up to the
        // path (which may hold spaces itself, and ends the line).
        let mut rest = line;
        let mut field = || {
            let (f, r) = rest.split_once(' ').unwrap_or((rest, ""));
            rest = r;
            f
        };
        let (range, perms, off, dev, inode) = (field(), field(), field(), field(), field());
        let (a, b) = range.split_once('-')?;
        let (major, minor) = dev.split_once(':')?;
        let hex = |v: &str| u64::from_str_radix(v, 16).ok();
        let path = rest.trim_start_matches(' ');
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (path, false),
        };
        Some(MapsLine {
            start: hex(a)?,
            end: hex(b)?,
            perms,
            pgoff: hex(off)?,
            dev: libc::makedev(
                u32::try_from(hex(major)?).ok()?,
                u32::try_from(hex(minor)?).ok()?,
            ),
            inode: inode.parse().ok()?,
            path,
            deleted,
        })
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
fn frame_pointer_share(symbols: &[Symbol], addr: u64, text: &[u8]) -> f32 {
    const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let funcs: Vec<&[u8]> = symbols
        .iter()
        .filter(|s| s.1 >= 16 && s.0 >= addr)
        .filter_map(|s| {
            let at = usize::try_from(s.0 - addr).ok()?;
            text.get(at..at.checked_add(8)?)
        })
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
    /// By device and inode.
    files: HashMap<(u64, u64), Option<Arc<ElfFile>>>,
    last_scan: Option<std::time::Instant>,
    /// Bumped whenever `maps` changes (the unwinder re-reads them).
    pub(crate) generation: u64,
    /// What the files read hold, within `FILES_CAP` (shared with the
    /// flusher's naming, `debuginfo::Symbolizer`).
    pub(crate) files_cap: Arc<FilesCap>,
}

/// Most heap the mapped files' tables hold: the sampler's (symbols and
/// unwind sections, copied out of the files) and the flusher's for naming
/// frames (symbols with those of the debug files and MiniDebugInfo, and
/// the bound of the DWARF tables read for inlined frames). A file past it
/// is left unread (the sampler's: its frames unwound by frame pointers
/// only; the flusher's: its frames unnamed), a DWARF past it unread (its
/// frames named from symbols only), each counted in
/// `Stats::cpu_files_no_memory`. Kept out of the memory budget: without
/// them samples have no use, and one large binary's take a budget's worth
/// (an 18 MB binary's, about 5 MB).
pub(crate) const FILES_CAP: u64 = 128 << 20;

/// The heap held by files' tables against `FILES_CAP`, and the files (or
/// DWARF) refused.
#[derive(Default)]
pub(crate) struct FilesCap {
    held: AtomicU64,
    refused: AtomicU64,
}

impl FilesCap {
    /// Holds `bytes` more if that stays within `FILES_CAP`; else counts a
    /// refusal and returns false.
    pub(crate) fn hold(&self, bytes: u64) -> bool {
        let held = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                h.checked_add(bytes).filter(|&n| n <= FILES_CAP)
            });
        if held.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        held.is_ok()
    }

    /// Files (or DWARF) refused so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Modules {
    /// None read yet; their files held within `files_cap`.
    pub(crate) fn with_files_cap(files_cap: Arc<FilesCap>) -> Modules {
        Modules {
            files_cap,
            ..Modules::default()
        }
    }

    /// Reads `/proc/self/maps` and every new file's ELF.
    pub(crate) fn scan(&mut self) {
        self.last_scan = Some(std::time::Instant::now());
        if let Ok(text) = std::fs::read_to_string("/proc/self/maps") {
            self.scan_text(&text);
        }
    }

    /// The executable mappings of `text`, in `/proc/<pid>/maps`'s form.
    // The files are shared with the unwinder on the sampler's own thread
    // (never sent: the sampler makes its `Modules` there), so `ElfFile`
    // need not be `Sync` (its lazily parsed DWARF is not; only the
    // flusher's files have any).
    #[allow(clippy::arc_with_non_send_sync)]
    pub(crate) fn scan_text(&mut self, text: &str) {
        let mut maps = Vec::new();
        for line in text.lines() {
            let Some(line) = MapsLine::parse(line) else {
                continue;
            };
            if !line.perms.contains('x') || !line.path.starts_with('/') {
                continue;
            }
            // By the file mapped (device and inode), not its path: a path
            // may name another file since.
            let cap = &self.files_cap;
            let file = self
                .files
                .entry((line.dev, line.inode))
                .or_insert_with(|| {
                    // What is kept of the files is capped.
                    let f = ElfFile::read_mapped(&line)?;
                    cap.hold(f.heap_bytes()).then(|| Arc::new(f))
                })
                .clone();
            maps.push(Mapping {
                start: line.start,
                end: line.end,
                pgoff: line.pgoff,
                path: line.path.to_string(),
                dev: line.dev,
                inode: line.inode,
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
        (pc < self.maps.get(i)?.end).then_some(i)
    }

    /// Whether the program's own code keeps frame pointers (most of its
    /// functions set one up): then the kernel's call chains are whole.
    pub(crate) fn main_has_frame_pointers(&self) -> bool {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return false;
        };
        let exe = exe.to_string_lossy();
        let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
        self.maps
            .iter()
            .find(|m| m.path == exe)
            .and_then(|m| m.file.as_ref())
            .is_some_and(|f| f.frame_pointer_share >= 0.8)
    }

    /// The demangled name of the function at `pc` in mapping `map`.
    #[cfg(test)]
    pub(crate) fn function_name(&self, map: usize, pc: u64) -> Option<String> {
        let m = self.maps.get(map)?;
        let svma = m.svma(pc)?;
        let name = m.file.as_ref()?.symbol(svma)?;
        Some(format!("{:#}", rustc_demangle::demangle(name)))
    }
}

#[cfg(test)]
mod tests;
