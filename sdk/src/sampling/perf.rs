//! One `perf_event_open` event per thread: a CPU-clock software event that
//! samples the thread while it runs, and the mmap ring the kernel writes its
//! records into. Reading the ring gives [`PerfRecord`]s.
//!
//! Facts this follows (checked on a development VM): unprivileged
//! self-sampling works at `perf_event_paranoid` 2 with `exclude_kernel`
//! (without it: `EACCES`); there may be no hardware PMU, so the software
//! CPU clock; `use_clockid` with `CLOCK_BOOTTIME` puts the samples on the
//! slices' clock; a ring past the locked-memory limit fails `mmap` with
//! `EPERM`.

use std::io;

// perf_event_attr.type / config
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
// sample_type bits
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_CALLCHAIN: u64 = 1 << 5;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_PERIOD: u64 = 1 << 8;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_STACK_USER: u64 = 1 << 13;
// attr flag bits
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_FREQ: u64 = 1 << 10;
const FLAG_WATERMARK: u64 = 1 << 14;
const FLAG_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
const FLAG_USE_CLOCKID: u64 = 1 << 25;
// x86_64 user registers we ask for (perf_regs.h): BP, SP, IP, in that order.
const REG_BP: u32 = 6;
const REG_SP: u32 = 7;
const REG_IP: u32 = 8;
// record types
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;
/// Call chain entries at or above this are context markers, not addresses.
const CONTEXT_MAX: u64 = (-4095i64) as u64;

/// The event's fd is closed on exec.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

/// `struct perf_event_attr` up to `sig_data` (PERF_ATTR_SIZE_VER8, 128 bytes).
#[repr(C)]
#[derive(Default)]
struct Attr {
    type_: u32,
    size: u32,
    config: u64,
    sample_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_watermark: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
}

const _: () = assert!(std::mem::size_of::<Attr>() == 128);

/// How a sample's stack is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StackSource {
    /// The kernel walks the frame pointers (`PERF_SAMPLE_CALLCHAIN`).
    Callchain,
    /// The kernel copies this many bytes of the user stack and the
    /// registers; unwound later from `.eh_frame`.
    Copy(u32),
}

/// A record read from an event's ring.
pub(crate) enum PerfRecord<'a> {
    Sample(RawSample<'a>),
    /// The kernel dropped this many records (the ring was full).
    Lost(u64),
}

/// A sample as the kernel wrote it; borrows the copy of the ring's records
/// `drain` made.
pub(crate) struct RawSample<'a> {
    pub(crate) tid: i32,
    pub(crate) time_ns: u64,
    pub(crate) cpu: u32,
    /// The call chain (callchain mode).
    pub(crate) chain: Chain<'a>,
    /// Registers at the sample (copy mode): ip, sp, bp.
    pub(crate) regs: Option<[u64; 3]>,
    /// The copied stack, from `sp` up (copy mode).
    pub(crate) stack: &'a [u8],
}

/// A call chain's words as the kernel wrote them, innermost first, context
/// markers included: read in place, no allocation per sample.
#[derive(Clone, Copy, Default)]
pub(crate) struct Chain<'a>(&'a [u8]);

impl Chain<'_> {
    /// The user-space return addresses, innermost first.
    pub(crate) fn pcs(&self) -> impl Iterator<Item = u64> + '_ {
        self.0
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
            .filter(|&ip| ip < CONTEXT_MAX)
    }
}

/// An open event and its mapped ring.
pub(crate) struct PerfEvent {
    fd: libc::c_int,
    base: *mut u8,
    /// Bytes mapped (one metadata page and the data pages).
    map_len: usize,
    data_off: usize,
    data_size: usize,
    source: StackSource,
    /// The records of one `drain`, copied out of the ring.
    copy: Vec<u8>,
}

// SAFETY: the mapping is owned by this value alone; the kernel is the only
// other writer, and it synchronises through `data_head`/`data_tail`.
unsafe impl Send for PerfEvent {}

/// Why an event could not be made.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// `perf_event_open` itself failed (refused, or not supported).
    Open(io::Error),
    /// The ring could not be mapped (`EPERM`: the locked-memory limit).
    Map(io::Error),
}

impl PerfEvent {
    /// Opens a sampling event on thread `tid` at `hz` samples per CPU
    /// second with a ring of `data_pages` pages (a power of two), and
    /// enables it.
    pub(crate) fn open(
        tid: i32,
        hz: u32,
        source: StackSource,
        data_pages: usize,
    ) -> Result<PerfEvent, OpenError> {
        let mut attr = Attr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<Attr>() as u32,
            config: PERF_COUNT_SW_CPU_CLOCK,
            sample_freq: hz as u64,
            sample_type: SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_PERIOD,
            flags: FLAG_DISABLED
                | FLAG_EXCLUDE_KERNEL
                | FLAG_EXCLUDE_HV
                | FLAG_FREQ
                | FLAG_WATERMARK
                | FLAG_USE_CLOCKID,
            clockid: libc::CLOCK_BOOTTIME,
            ..Attr::default()
        };
        let page = page_size();
        let data_size = data_pages * page;
        // Woken (`poll`) once half the ring is full.
        attr.wakeup_watermark = (data_size / 2) as u32;
        match source {
            StackSource::Callchain => {
                attr.sample_type |= SAMPLE_CALLCHAIN;
                attr.flags |= FLAG_EXCLUDE_CALLCHAIN_KERNEL;
            }
            StackSource::Copy(bytes) => {
                attr.sample_type |= SAMPLE_REGS_USER | SAMPLE_STACK_USER;
                attr.sample_regs_user = (1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP);
                attr.sample_stack_user = bytes;
            }
        }
        // SAFETY: `attr` is a valid, initialised perf_event_attr of the size
        // it states, alive for the call; the other arguments are plain
        // integers (pid = the thread, cpu = any, no group, no flags).
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const Attr,
                tid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        } as libc::c_int;
        if fd < 0 {
            return Err(OpenError::Open(io::Error::last_os_error()));
        }
        let map_len = page + data_size;
        // SAFETY: mapping a fresh region (address chosen by the kernel) of
        // the event's fd, shared and read-write as perf's ring requires.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: `fd` is ours and open; closed once.
            unsafe { libc::close(fd) };
            return Err(OpenError::Map(e));
        }
        let ev = PerfEvent {
            fd,
            base: base as *mut u8,
            map_len,
            data_off: page,
            data_size,
            source,
            copy: Vec::new(),
        };
        // SAFETY: an ioctl without argument on our open perf fd.
        if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) } < 0 {
            return Err(OpenError::Open(io::Error::last_os_error()));
        }
        Ok(ev)
    }

    pub(crate) fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// The ring's `data_head` and `data_tail`; the references must not
    /// outlive the mapping (`drain` keeps them within one call).
    fn head_tail<'a>(
        base: *mut u8,
    ) -> (
        &'a std::sync::atomic::AtomicU64,
        &'a std::sync::atomic::AtomicU64,
    ) {
        // SAFETY: `perf_event_mmap_page` keeps `data_head` at byte 1024 and
        // `data_tail` at 1032 of the first page, which stays mapped while
        // the caller (`drain` or `has_data`, borrowing `self`) uses them;
        // both are 8-byte aligned u64s the kernel reads and
        // writes atomically, so viewing them as `AtomicU64` is sound.
        unsafe {
            (
                &*(base.add(1024) as *const std::sync::atomic::AtomicU64),
                &*(base.add(1032) as *const std::sync::atomic::AtomicU64),
            )
        }
    }

    /// Whether the kernel wrote records not read yet.
    pub(crate) fn has_data(&self) -> bool {
        let (head, tail) = Self::head_tail(self.base);
        head.load(std::sync::atomic::Ordering::Relaxed)
            != tail.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads every record the kernel has written since the last call and
    /// hands each to `f`; frees their space for the kernel.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(PerfRecord<'_>)) {
        let (head_a, tail_a) = Self::head_tail(self.base);
        // Acquire: the records below `head` are written.
        let head = head_a.load(std::sync::atomic::Ordering::Acquire);
        let tail = tail_a.load(std::sync::atomic::Ordering::Relaxed);
        let written = head.wrapping_sub(tail);
        if written == 0 {
            return;
        }
        // More than the ring holds: never from a sane kernel; skipped.
        if written <= self.data_size as u64 {
            // SAFETY: the data area is `data_size` bytes mapped at
            // `data_off` for the life of `self`, readable. Of it, only the
            // `written` bytes from `tail` (wrapping) are read, and the kernel
            // writes none of them until `data_tail` moves past them (the
            // store below, after the copy): the bytes it may be writing
            // meanwhile (the ring's free part) are never read, nor is any
            // reference made over them.
            unsafe {
                copy_ring(
                    self.base.add(self.data_off),
                    self.data_size,
                    tail,
                    written as usize,
                    &mut self.copy,
                )
            };
            for_each_record(&self.copy, self.source, &mut f);
        }
        // Release: we are done reading what lies below `head`.
        tail_a.store(head, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for PerfEvent {
    fn drop(&mut self) {
        // SAFETY: the mapping and the fd are ours, made in `open`, released
        // once here.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.map_len);
            libc::close(self.fd);
        }
    }
}

/// Copies the `len` bytes of the ring of `size` bytes at `ring` that start
/// at position `from` (taken modulo `size`, wrapping round its end) into
/// `out` (replacing what it held).
///
/// # Safety
///
/// `ring` must be valid for reads of `size` bytes, `len <= size`, and
/// nothing may write those `len` bytes during the call (the rest of the
/// ring may be written: it is not read).
unsafe fn copy_ring(ring: *const u8, size: usize, from: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    if size == 0 || len > size {
        return;
    }
    out.reserve(len);
    let at = (from % size as u64) as usize;
    let first = len.min(size - at);
    // SAFETY: `at + first <= size` and `len - first <= at` (when the copy
    // wraps, `first = size - at` and `len <= size`), so both source ranges
    // lie in the `size` readable bytes at `ring`, within the `len` bytes the
    // caller guarantees nothing writes; `out` has room for `len` bytes
    // after `clear` and `reserve`, and is our own allocation, so it cannot
    // overlap the ring. `set_len` covers exactly the bytes copied.
    unsafe {
        std::ptr::copy_nonoverlapping(ring.add(at), out.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(ring, out.as_mut_ptr().add(first), len - first);
        out.set_len(len);
    }
}

/// Hands each record of `records` (a copy of the ring's written part, in
/// order) to `f`; stops at a record whose header does not fit (never from a
/// sane kernel).
fn for_each_record(records: &[u8], source: StackSource, f: &mut impl FnMut(PerfRecord<'_>)) {
    let mut rest = records;
    while let Some(hdr) = rest.first_chunk::<8>() {
        let kind = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let len = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
        if len < 8 || len > rest.len() {
            break;
        }
        let (rec, next) = rest.split_at(len);
        match kind {
            RECORD_SAMPLE => {
                if let Some(s) = parse_sample(&rec[8..], source) {
                    f(PerfRecord::Sample(s));
                }
            }
            RECORD_LOST => {
                if let Some(n) = rec.get(16..24) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(n);
                    f(PerfRecord::Lost(u64::from_ne_bytes(w)));
                }
            }
            _ => {}
        }
        rest = next;
    }
}

/// A cursor over a record's u64 words.
struct Words<'a>(&'a [u8]);

impl<'a> Words<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (w, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_ne_bytes(*w))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(b)
    }
}

/// Parses a `PERF_RECORD_SAMPLE` body of the layout `open` asked for.
pub(crate) fn parse_sample(body: &[u8], source: StackSource) -> Option<RawSample<'_>> {
    let mut w = Words(body);
    let pid_tid = w.u64()?;
    let tid = (pid_tid >> 32) as i32;
    let time_ns = w.u64()?;
    let cpu = w.u64()? as u32;
    let _period = w.u64()?;
    let mut s = RawSample {
        tid,
        time_ns,
        cpu,
        chain: Chain::default(),
        regs: None,
        stack: &[],
    };
    match source {
        StackSource::Callchain => {
            let nr = w.u64()? as usize;
            if nr > 4096 {
                return None;
            }
            s.chain = Chain(w.bytes(nr * 8)?);
        }
        StackSource::Copy(_) => {
            let abi = w.u64()?;
            if abi != 0 {
                // In the mask's bit order: BP (6), SP (7), IP (8).
                let bp = w.u64()?;
                let sp = w.u64()?;
                let ip = w.u64()?;
                s.regs = Some([ip, sp, bp]);
            }
            let size = w.u64()? as usize;
            if size > 0 {
                let data = w.bytes(size)?;
                let dyn_size = (w.u64()? as usize).min(size);
                s.stack = &data[..dyn_size];
            }
        }
    }
    Some(s)
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_with_a_callchain_parses_and_markers_are_dropped() {
        let mut b = Vec::new();
        for w in [
            (7u64 << 32) | 5,
            1_000,
            1,
            10_000,
            3,
            (-512i64) as u64, // PERF_CONTEXT_USER
            0x4000,
            0x5000,
        ] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        let s = parse_sample(&b, StackSource::Callchain).unwrap();
        assert_eq!((s.tid, s.time_ns, s.cpu), (7, 1_000, 1));
        assert_eq!(s.chain.pcs().collect::<Vec<_>>(), vec![0x4000, 0x5000]);
        // Cut short: no sample, no panic.
        assert!(parse_sample(&b[..50], StackSource::Callchain).is_none());
    }

    /// A `PERF_RECORD_LOST` record of `n` lost records.
    fn lost_record(n: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&RECORD_LOST.to_ne_bytes());
        r.extend_from_slice(&[0, 0]);
        r.extend_from_slice(&24u16.to_ne_bytes());
        r.extend_from_slice(&1u64.to_ne_bytes()); // id
        r.extend_from_slice(&n.to_ne_bytes());
        r
    }

    #[test]
    fn records_wrapping_round_the_rings_end_are_copied_out_whole() {
        // A ring of 64 bytes whose three records (72 bytes written, 24 at
        // a time) start at position 40 of a tail that has gone round twice:
        // the second record straddles the end. The bytes outside
        // `tail..head` are the kernel's (0xee): never read.
        let records: Vec<u8> = [1u64, 2, 3].iter().flat_map(|&n| lost_record(n)).collect();
        let size = 64usize;
        let tail = 2 * size as u64 + 40;
        let len = 48; // the first two records
        let mut ring = vec![0xeeu8; size];
        for (i, b) in records[..len].iter().enumerate() {
            ring[(40 + i) % size] = *b;
        }
        let mut out = vec![7u8; 3];
        // SAFETY: `ring` is `size` readable bytes nothing else writes.
        unsafe { copy_ring(ring.as_ptr(), size, tail, len, &mut out) };
        assert_eq!(out, records[..len]);
        let mut lost = Vec::new();
        for_each_record(&out, StackSource::Callchain, &mut |r| {
            if let PerfRecord::Lost(n) = r {
                lost.push(n)
            }
        });
        assert_eq!(lost, vec![1, 2]);
        // Not wrapping, and the whole ring.
        // SAFETY: as above.
        unsafe { copy_ring(ring.as_ptr(), size, 0, 8, &mut out) };
        assert_eq!(out, ring[..8]);
        // SAFETY: as above.
        unsafe { copy_ring(ring.as_ptr(), size, 17, size, &mut out) };
        assert_eq!(out.len(), size);
        assert_eq!(out[..size - 17], ring[17..]);
        assert_eq!(out[size - 17..], ring[..17]);
        // More than the ring holds: nothing.
        // SAFETY: as above (nothing is read).
        unsafe { copy_ring(ring.as_ptr(), size, 0, size + 1, &mut out) };
        assert!(out.is_empty());
    }

    #[test]
    fn a_record_whose_length_runs_past_the_copy_ends_the_read() {
        let mut records = lost_record(5);
        let mut torn = lost_record(6);
        torn[6..8].copy_from_slice(&200u16.to_ne_bytes());
        records.extend_from_slice(&torn);
        let mut zero = lost_record(7);
        zero[6..8].copy_from_slice(&0u16.to_ne_bytes());
        let mut lost = Vec::new();
        for records in [&records[..], &zero[..], &records[..30]] {
            for_each_record(records, StackSource::Callchain, &mut |r| {
                if let PerfRecord::Lost(n) = r {
                    lost.push(n)
                }
            });
        }
        assert_eq!(lost, vec![5, 5]);
    }

    #[test]
    fn a_sample_with_a_stack_copy_parses() {
        let mut b = Vec::new();
        for w in [(7u64 << 32) | 5, 1_000, 0, 1, 2, 0xb0, 0x50, 0x1234, 16] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(&[9u8; 16]);
        b.extend_from_slice(&8u64.to_ne_bytes());
        let s = parse_sample(&b, StackSource::Copy(16)).unwrap();
        assert_eq!(s.regs, Some([0x1234, 0x50, 0xb0]));
        assert_eq!(s.stack, &[9u8; 8]);
    }
}
