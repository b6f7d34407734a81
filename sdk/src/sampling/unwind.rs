//! Stacks from a copy of the user stack and registers: unwound with the
//! modules' `.eh_frame` (framehop, a pure-Rust DWARF CFI unwinder that falls
//! back to frame pointers where a function has no unwind information).
//! Runs on the sampler thread, never on a recording thread.
//!
//! Where the copy ends before the stack does (a caller's frame bigger than
//! the copy: a 64 KiB buffer on the stack), the rest is read from the
//! sampled thread's stack itself ([`LiveStack`]): the process reads its own
//! memory with `process_vm_readv` (an unmapped page is an error, never a
//! fault), only within the mapping that holds the sample's stack pointer.
//! The frames read there are the callers' as they are when the sampler
//! unwinds (within about 30 ms of the sample): the same frames while the
//! thread is still inside the sampled call, which is what a frame that big
//! holds; a thread that returned from them meanwhile gives the frames it
//! has now, or a stop.

use super::modules::Modules;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes read from a thread's own stack at a time, past the copy.
const LIVE_CHUNK: u64 = 16 << 10;
/// Most bytes read from a thread's own stack for one sample.
const LIVE_MAX: u64 = 1 << 20;
/// How often a thread's stack mapping is looked for again when its stack
/// pointer is outside the one known (a signal stack, a new thread reusing
/// the tid).
const BOUNDS_AGAIN: Duration = Duration::from_secs(1);

/// The mapping of each sampled thread's stack, and a buffer of what was
/// last read from one past its copy.
#[derive(Default)]
pub(crate) struct LiveStack {
    /// Per thread: its stack's mapping (None: none found) and when it was
    /// looked for.
    bounds: HashMap<i32, (Option<Range<u64>>, Instant)>,
    buf: Vec<u8>,
    /// The addresses `buf` holds.
    at: Range<u64>,
}

impl LiveStack {
    /// Forgets thread `tid` (it exited).
    pub(crate) fn forget(&mut self, tid: i32) {
        self.bounds.remove(&tid);
    }

    /// The mapping of `tid`'s stack that holds `sp`: found in
    /// `/proc/self/maps` once per thread (again at most once a second if
    /// `sp` leaves it); only a private read-write mapping of no file (or
    /// the main thread's `[stack]`).
    fn bounds(&mut self, tid: i32, sp: u64) -> Option<Range<u64>> {
        if let Some((known, when)) = self.bounds.get(&tid) {
            if known.as_ref().is_some_and(|r| r.contains(&sp)) {
                return known.clone();
            }
            if when.elapsed() < BOUNDS_AGAIN {
                return None;
            }
        }
        let found = std::fs::read_to_string("/proc/self/maps")
            .ok()
            .and_then(|maps| stack_mapping(&maps, sp));
        self.bounds.insert(tid, (found.clone(), Instant::now()));
        found
    }

    /// Starts a sample: nothing read yet.
    fn begin(&mut self) {
        self.at = 0..0;
    }

    /// The word at `addr` of the thread's stack `within` (`addr` past the
    /// copy), read from the process's memory a chunk at a time.
    fn read(&mut self, addr: u64, within: &Range<u64>, read_so_far: &mut u64) -> Option<u64> {
        let last = addr.checked_add(8)?;
        if addr < within.start || last > within.end {
            return None;
        }
        if !(self.at.start <= addr && last <= self.at.end) {
            if *read_so_far >= LIVE_MAX {
                return None;
            }
            let from = (addr & !7).max(within.start);
            let to = from.saturating_add(LIVE_CHUNK).min(within.end);
            let len = (to - from) as usize;
            self.buf.resize(len, 0);
            let got = read_own_memory(from, &mut self.buf)?;
            *read_so_far += got as u64;
            self.at = from..from + got as u64;
            if last > self.at.end {
                return None;
            }
        }
        let at = (addr - self.at.start) as usize;
        Some(u64::from_ne_bytes(
            self.buf.get(at..at + 8)?.try_into().ok()?,
        ))
    }
}

/// The mapping of `maps` (in `/proc/<pid>/maps`'s form) holding `sp`, if
/// it can be a thread's stack: readable and writable, private, of no file
/// (glibc's thread stacks) or `[stack]` (the main thread's).
pub(crate) fn stack_mapping(maps: &str, sp: u64) -> Option<Range<u64>> {
    for line in maps.lines() {
        let mut parts = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        if !(start <= sp && sp < end) {
            continue;
        }
        let path = parts.nth(3).unwrap_or("");
        let ok = perms.starts_with("rw")
            && perms.ends_with('p')
            && (path.is_empty() || path == "[stack]");
        return ok.then_some(start..end);
    }
    None
}

/// Reads `out.len()` bytes of this process's memory at `addr` into `out`
/// with `process_vm_readv` (an unmapped page ends the read: an error or a
/// short count, never a fault). The count read, None if nothing was.
fn read_own_memory(addr: u64, out: &mut [u8]) -> Option<usize> {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut libc::c_void,
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` is `out`, writable for its length and ours for the
    // call; the remote range is only read by the kernel, which checks it
    // page by page and reports a page not mapped (EFAULT or a short count)
    // instead of faulting; pid is our own, which the call always allows.
    let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (got > 0).then_some(got as usize)
}

/// Most frames kept per stack.
pub(crate) const MAX_FRAMES: usize = 256;

pub(crate) struct StackUnwinder {
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
    /// `Modules::generation` the unwinder was built for.
    generation: u64,
}

impl StackUnwinder {
    pub(crate) fn new() -> Self {
        StackUnwinder {
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            generation: u64::MAX,
        }
    }

    /// Rebuilds the module list if the process's mappings changed.
    fn sync(&mut self, modules: &Modules) {
        if self.generation == modules.generation {
            return;
        }
        self.generation = modules.generation;
        self.unwinder = UnwinderX86_64::new();
        for m in &modules.maps {
            let Some(f) = m.file.as_ref() else { continue };
            let u = &f.unwind;
            // The file's address = `rel_pc + load_bias`, so the address
            // of ELF address 0 is `start - pgoff - load_bias`.
            let base_avma = m.start.wrapping_sub(m.pgoff).wrapping_sub(f.load_bias);
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: u.text.clone(),
                got_svma: u.got.clone(),
                eh_frame_svma: u.eh_frame.as_ref().map(|e| e.0.clone()),
                eh_frame: u.eh_frame.as_ref().map(|e| e.1.clone()),
                eh_frame_hdr_svma: u.eh_frame_hdr.as_ref().map(|e| e.0.clone()),
                eh_frame_hdr: u.eh_frame_hdr.as_ref().map(|e| e.1.clone()),
                ..Default::default()
            };
            self.unwinder
                .add_module(Module::new(m.path.clone(), m.start..m.end, base_avma, info));
        }
    }

    /// Unwinds the stack copied at `sp` with registers `[ip, sp, bp]` into
    /// `out` (innermost first). Returns false if the walk stopped before
    /// the stack's root (the frames found are kept). With `live` (the
    /// sampled thread and the reader of its stack), what the walk needs
    /// past the copy is read from the thread's stack itself.
    pub(crate) fn unwind(
        &mut self,
        modules: &Modules,
        regs: [u64; 3],
        stack: &[u8],
        live: Option<(i32, &mut LiveStack)>,
        out: &mut Vec<u64>,
    ) -> bool {
        self.sync(modules);
        let [ip, sp, bp] = regs;
        let end = sp.saturating_add(stack.len() as u64);
        // Past the copy: from its end to the end of the thread's stack.
        let mut live = live.and_then(|(tid, l)| {
            let within = l.bounds(tid, sp)?;
            l.begin();
            Some((l, end.max(within.start)..within.end, 0u64))
        });
        let mut read = |addr: u64| -> Result<u64, ()> {
            if addr >= sp && addr.checked_add(8).is_some_and(|e| e <= end) {
                let at = (addr - sp) as usize;
                return Ok(u64::from_ne_bytes(stack[at..at + 8].try_into().unwrap()));
            }
            match &mut live {
                Some((l, within, so_far)) => l.read(addr, within, so_far).ok_or(()),
                None => Err(()),
            }
        };
        let mut it = self.unwinder.iter_frames(
            ip,
            UnwindRegsX86_64::new(ip, sp, bp),
            &mut self.cache,
            &mut read,
        );
        loop {
            match it.next() {
                Ok(Some(f)) => {
                    out.push(f.address());
                    if out.len() >= MAX_FRAMES {
                        return false;
                    }
                }
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_private_anonymous_or_stack_mapping_bounds_a_stack() {
        let maps = "\
1000-2000 r-xp 00000000 fd:01 12 /bin/x
3000-5000 rw-p 00000000 00:00 0 
6000-7000 rw-s 00000000 00:01 5 /dev/zero (deleted)
8000-9000 rw-p 00000000 00:00 0                          [stack]
a000-b000 rw-p 00000000 fd:01 13 /tmp/data
c000-d000 ---p 00000000 00:00 0 
";
        assert_eq!(stack_mapping(maps, 0x3800), Some(0x3000..0x5000));
        assert_eq!(stack_mapping(maps, 0x8000), Some(0x8000..0x9000));
        for sp in [0x1800, 0x6800, 0xa800, 0xc800, 0x5000, 0xffff_ffff] {
            assert_eq!(stack_mapping(maps, sp), None, "{sp:#x}");
        }
        assert_eq!(stack_mapping("garbage\n1-2\nzz-1 rw-p", 1), None);
    }

    #[test]
    fn a_threads_own_stack_is_read_past_a_copy_within_its_mapping() {
        let words = [0x1111u64, 0x2222, 0x3333, 0x4444];
        let sp = words.as_ptr() as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let within = stack_mapping(&maps, sp).expect("this thread's stack");
        let mut live = LiveStack::default();
        live.begin();
        let mut so_far = 0;
        // Past a copy of one word: the second word, read from the stack.
        let from = (sp + 8).max(within.start)..within.end;
        assert_eq!(live.read(sp + 8, &from, &mut so_far), Some(0x2222));
        assert_eq!(live.read(sp + 24, &from, &mut so_far), Some(0x4444));
        assert!(so_far > 0 && so_far <= LIVE_CHUNK);
        // Below the copy's end, or past the mapping: nothing.
        assert_eq!(live.read(sp, &from, &mut so_far), None);
        assert_eq!(live.read(within.end - 4, &from, &mut so_far), None);
        assert_eq!(live.read(u64::MAX - 3, &from, &mut so_far), None);
        std::hint::black_box(&words);
    }
}
