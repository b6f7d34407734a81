//! Stacks from a copy of the user stack and registers: unwound with the
//! modules' `.eh_frame` (framehop, a pure-Rust DWARF CFI unwinder that falls
//! back to frame pointers where a function has no unwind information).
//! Runs on the sampler thread, never on a recording thread.

use super::modules::Modules;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use std::sync::Arc;

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
    /// the stack's root (the frames found are kept).
    pub(crate) fn unwind(
        &mut self,
        modules: &Modules,
        regs: [u64; 3],
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> bool {
        self.sync(modules);
        let [ip, sp, bp] = regs;
        let end = sp.saturating_add(stack.len() as u64);
        let mut read = |addr: u64| -> Result<u64, ()> {
            if addr < sp || addr.checked_add(8).is_none_or(|e| e > end) {
                return Err(());
            }
            let at = (addr - sp) as usize;
            Ok(u64::from_ne_bytes(stack[at..at + 8].try_into().unwrap()))
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
