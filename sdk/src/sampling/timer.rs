//! The fallback where `perf_event_open` is refused (seccomp in containers,
//! `perf_event_paranoid` 3 or 4): a POSIX timer per thread on the thread's
//! own CPU-time clock, delivering `SIGPROF` to that thread
//! (`SIGEV_THREAD_ID`). The handler only copies the registers and the top
//! of the stack into buffers made beforehand; the sampler thread unwinds
//! them as it does the kernel's stack copies. The kernel's tick bounds the
//! rate (`CONFIG_HZ`: 250 on many kernels, so 1 kHz asked gives ~250).
//!
//! The handler finds its thread's buffers through `si_value`, an index into
//! [`SLOTS`], whose pointer it takes (swaps out) for the time it writes; the
//! sampler frees a thread's buffers only once it took that pointer itself,
//! so a late signal never writes into freed memory. The stack is copied
//! with `process_vm_readv` on our own process: a system call that stops at
//! the first unmapped page instead of faulting.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Threads sampled at once by timers, at most.
const MAX_THREADS: usize = 4096;
/// Stack bytes copied per sample: as much as perf copies
/// (`engine::STACK_COPY`, whose comment says why 8 KiB).
pub(crate) const COPY: usize = 8 << 10;
/// Buffers per thread: samples between two reads of the sampler (~20 ms;
/// 5 at 250 Hz).
const BUFS: usize = 8;

const FREE: u32 = 0;
const WRITING: u32 = 1;
const FULL: u32 = 2;

/// A buffer: `data` is written by the handler only between its
/// `FREE → WRITING` exchange and `FULL`, read by the sampler only between
/// seeing `FULL` and storing `FREE`.
struct Buf {
    state: AtomicU32,
    data: UnsafeCell<BufData>,
}

struct BufData {
    tid: i32,
    cpu: u32,
    ts_ns: u64,
    regs: [u64; 3],
    len: usize,
    bytes: [u8; COPY],
}

/// One thread's buffers.
struct Slot {
    bufs: [Buf; BUFS],
}

// SAFETY: `data` is accessed by one side at a time, as `state` says (above).
unsafe impl Sync for Slot {}

/// Bytes of one thread's buffers (taken from the budget).
pub(crate) const SLOT_BYTES: u64 = std::mem::size_of::<Slot>() as u64;

static SLOTS: [AtomicPtr<Slot>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Indexes of `SLOTS` given to a thread (only the sampler thread takes and
/// gives them back; a slot's pointer may be null for a moment while a
/// handler writes, so the pointer cannot tell).
static TAKEN: [AtomicBool; MAX_THREADS] = [const { AtomicBool::new(false) }; MAX_THREADS];
/// Signals that found no free buffer (or no slot).
pub(crate) static DROPPED: AtomicU64 = AtomicU64::new(0);

/// `SIGPROF`'s handler: copies registers and stack, nothing else. Only
/// async-signal-safe calls (`gettid`, `clock_gettime`, `sched_getcpu`,
/// `process_vm_readv`: system calls or the vDSO); no lock, no allocation.
extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler; errno is this thread's and restored on return.
    unsafe {
        let errno = *libc::__errno_location();
        let idx = (*info).si_value().sival_ptr as usize;
        if let Some(cell) = SLOTS.get(idx) {
            let p = cell.swap(std::ptr::null_mut(), Ordering::Acquire);
            if p.is_null() {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            } else {
                fill(&*p, &*(uctx as *const libc::ucontext_t));
                cell.store(p, Ordering::Release);
            }
        }
        *libc::__errno_location() = errno;
    }
}

/// Writes one sample into a free buffer of `slot`.
fn fill(slot: &Slot, uc: &libc::ucontext_t) {
    let Some(cell) = slot.bufs.iter().find(|b| {
        b.state
            .compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // SAFETY: this buffer is ours until `FULL` (the exchange above).
    let buf = unsafe { &mut *cell.data.get() };
    let g = &uc.uc_mcontext.gregs;
    let (ip, sp, bp) = (
        g[libc::REG_RIP as usize] as u64,
        g[libc::REG_RSP as usize] as u64,
        g[libc::REG_RBP as usize] as u64,
    );
    buf.regs = [ip, sp, bp];
    // SAFETY: system calls with valid out-pointers into `buf`.
    unsafe {
        buf.tid = libc::syscall(libc::SYS_gettid) as i32;
        buf.cpu = libc::sched_getcpu().max(0) as u32;
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts);
        buf.ts_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    }
    // Page by page: the copy stops at the first page that is not mapped
    // (the end of the stack) and keeps what it read before.
    let page = 4096u64;
    let mut remote = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; COPY / 4096 + 1];
    let mut n = 0;
    let (mut at, end) = (sp, sp.saturating_add(COPY as u64));
    while at < end && n < remote.len() {
        let next = ((at / page) + 1) * page;
        let stop = next.min(end);
        remote[n] = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: (stop - at) as usize,
        };
        n += 1;
        at = stop;
    }
    let local = libc::iovec {
        iov_base: buf.bytes.as_mut_ptr() as *mut libc::c_void,
        iov_len: COPY,
    };
    // SAFETY: `local` is `buf.bytes` (COPY bytes, ours); the remote ranges
    // are read by the kernel, which reports unmapped ones instead of
    // faulting.
    let got = unsafe {
        libc::process_vm_readv(
            libc::getpid(),
            &local,
            1,
            remote.as_ptr(),
            n as libc::c_ulong,
            0,
        )
    };
    buf.len = got.max(0) as usize;
    cell.state.store(FULL, Ordering::Release);
}

/// A copied sample, handed to the unwinder.
pub(crate) struct Copied<'a> {
    pub(crate) tid: i32,
    pub(crate) cpu: u32,
    pub(crate) ts_ns: u64,
    pub(crate) regs: [u64; 3],
    pub(crate) stack: &'a [u8],
}

/// Installs the handler (once per process; an existing `SIGPROF` handler
/// of the program is kept and the fallback refused).
pub(crate) fn install() -> Result<(), String> {
    // SAFETY: reading and setting a signal disposition with valid
    // sigaction structs; the handler is async-signal-safe (above).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old) != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        let ours = on_signal as *const () as libc::sighandler_t;
        if old.sa_sigaction == ours {
            return Ok(());
        }
        if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
            return Err("the program has a SIGPROF handler of its own".into());
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ours;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    // The copy needs `process_vm_readv` on ourselves: try it once.
    let probe = [0u8; 8];
    let mut into = [0u8; 8];
    let local = libc::iovec {
        iov_base: into.as_mut_ptr() as *mut libc::c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: probe.as_ptr() as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: valid iovecs of 8 bytes each, both ours.
    let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if got != 8 {
        return Err(format!(
            "process_vm_readv refused ({})",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// One thread's timer and buffers.
pub(crate) struct ThreadTimer {
    idx: usize,
    /// The slot, allocated in `start`, freed in `drop`.
    slot: *const Slot,
    timer: libc::timer_t,
}

// SAFETY: `timer_t` is an id the kernel gives; any thread may delete it.
unsafe impl Send for ThreadTimer {}

impl ThreadTimer {
    /// A timer firing every `1/hz` s of `tid`'s CPU time, with buffers.
    pub(crate) fn start(tid: i32, hz: u32) -> Result<ThreadTimer, String> {
        let idx = TAKEN
            .iter()
            .position(|t| {
                t.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or("too many threads")?;
        // Zeroed memory is a valid `Slot` (every buffer FREE).
        let layout = std::alloc::Layout::new::<Slot>();
        // SAFETY: a non-zero-sized layout.
        let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut Slot;
        if p.is_null() {
            TAKEN[idx].store(false, Ordering::Release);
            return Err("out of memory".into());
        }
        SLOTS[idx].store(p, Ordering::Release);
        // The thread's CPU-time clock (what `pthread_getcpuclockid` gives):
        // CPUCLOCK_SCHED of the thread, encoded as the kernel expects.
        let clock = ((!(tid as libc::clockid_t)) << 3) | 6;
        // SAFETY: a zeroed sigevent is valid; then plain fields are set.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGPROF;
        sev.sigev_value = libc::sigval {
            sival_ptr: idx as *mut libc::c_void,
        };
        sev.sigev_notify_thread_id = tid;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid sigevent and out-pointer.
        if unsafe { libc::timer_create(clock, &mut sev, &mut timer) } != 0 {
            let e = std::io::Error::last_os_error().to_string();
            free_slot(idx);
            return Err(e);
        }
        let period_ns = (1_000_000_000 / hz.max(1) as i64).max(1);
        let ts = libc::timespec {
            tv_sec: period_ns / 1_000_000_000,
            tv_nsec: period_ns % 1_000_000_000,
        };
        let spec = libc::itimerspec {
            it_interval: ts,
            it_value: ts,
        };
        // SAFETY: `timer` was just created; valid itimerspec.
        if unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) } != 0 {
            let e = std::io::Error::last_os_error().to_string();
            // SAFETY: deleting the timer we created.
            unsafe { libc::timer_delete(timer) };
            free_slot(idx);
            return Err(e);
        }
        Ok(ThreadTimer {
            idx,
            slot: p,
            timer,
        })
    }

    /// Hands every full buffer to `f` and frees it.
    pub(crate) fn drain(&self, mut f: impl FnMut(Copied<'_>)) {
        // SAFETY: the slot lives until `Drop` (only we free it).
        let slot = unsafe { &*self.slot };
        for b in &slot.bufs {
            if b.state.load(Ordering::Acquire) == FULL {
                // SAFETY: a FULL buffer is not written until set FREE.
                let d = unsafe { &*b.data.get() };
                f(Copied {
                    tid: d.tid,
                    cpu: d.cpu,
                    ts_ns: d.ts_ns,
                    regs: d.regs,
                    stack: &d.bytes[..d.len.min(COPY)],
                });
                b.state.store(FREE, Ordering::Release);
            }
        }
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: our timer, deleted once; no signal is queued by it after.
        unsafe { libc::timer_delete(self.timer) };
        free_slot(self.idx);
    }
}

/// Frees slot `idx` once no handler holds it (a signal already queued
/// then finds no slot and is counted as dropped).
fn free_slot(idx: usize) {
    loop {
        let p = SLOTS[idx].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: allocated in `start` with this layout; we took the
            // only pointer to it, so no handler can reach it any more.
            unsafe { std::alloc::dealloc(p as *mut u8, std::alloc::Layout::new::<Slot>()) };
            TAKEN[idx].store(false, Ordering::Release);
            return;
        }
        std::thread::yield_now();
    }
}
