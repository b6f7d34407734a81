//! What the sampler thread sleeps on and how it finds threads, at a cost
//! that does not grow with its wake-ups: an epoll set of the perf fds (each
//! registered once, woken when a ring reaches its watermark or its thread
//! exits), an eventfd that wakes it at once (the stop), and the thread list
//! read with `getdents64` from one fd into one buffer kept for the session.

use std::io;

/// The epoll key of the [`Bell`] (a perf fd's key is its thread's id).
pub(crate) const BELL: u64 = u64::MAX;

/// An eventfd another thread rings to wake the sampler.
pub(crate) struct Bell {
    fd: libc::c_int,
}

impl Bell {
    pub(crate) fn new() -> io::Result<Bell> {
        // SAFETY: eventfd takes two integers and returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Bell { fd })
    }

    pub(crate) fn fd(&self) -> libc::c_int {
        self.fd
    }

    pub(crate) fn ring(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd (a full
        // counter, never reached, would only fail the write).
        unsafe { libc::write(self.fd, (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter after a ring (non-blocking: nothing if unrung).
    pub(crate) fn clear(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64 from our eventfd.
        unsafe { libc::read(self.fd, (&mut n as *mut u64).cast(), 8) };
    }

    /// Sleeps until rung or `ms` passed (-1: no limit).
    pub(crate) fn wait(&self, ms: libc::c_int) {
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live, initialised pollfd.
        unsafe { libc::poll(&mut p, 1, ms) };
        self.clear();
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        // SAFETY: our fd, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// An epoll set; an fd leaves it when closed (it is never duplicated).
pub(crate) struct Epoll {
    fd: libc::c_int,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// A new set, or [`Epoll::none`] if the kernel refuses one.
    pub(crate) fn new() -> Epoll {
        // SAFETY: epoll_create1 takes a flag and returns a new fd or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        }
    }

    /// No set: the sampler ticks instead.
    pub(crate) fn none() -> Epoll {
        Epoll {
            fd: -1,
            events: Vec::new(),
        }
    }

    pub(crate) fn ok(&self) -> bool {
        self.fd >= 0
    }

    /// Watches `fd` for input (level-triggered), reported with `key`.
    pub(crate) fn add(&self, fd: libc::c_int, key: u64) -> bool {
        if self.fd < 0 {
            return false;
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: both fds are open; `ev` is a live, initialised event.
        unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev) == 0 }
    }

    /// Sleeps until an fd is ready or `ms` passed; hands each ready fd's
    /// key to `f`, with whether it hung up (`EPOLLHUP`: a perf event whose
    /// thread exited).
    pub(crate) fn wait(&mut self, ms: libc::c_int, mut f: impl FnMut(u64, bool)) {
        // SAFETY: `events` is a live array of `len` epoll_events the kernel
        // fills; it returns how many it filled (or -1).
        let n = unsafe {
            libc::epoll_wait(
                self.fd,
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                ms,
            )
        };
        for ev in &self.events[..n.max(0) as usize] {
            let (key, flags) = (ev.u64, ev.events);
            f(key, flags & libc::EPOLLHUP as u32 != 0);
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: our fd, closed once.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// The process's thread ids, read from `/proc/self/task`.
pub(crate) struct TaskList {
    /// The directory, open for the session (-1: could not be opened).
    fd: libc::c_int,
    buf: Vec<u8>,
    tids: Vec<i32>,
}

impl TaskList {
    pub(crate) fn open() -> TaskList {
        // SAFETY: a NUL-terminated path and flags; a new fd or -1.
        let fd = unsafe {
            libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        TaskList {
            fd,
            buf: vec![0; 16 << 10],
            tids: Vec::new(),
        }
    }

    /// Nothing (a placeholder while the sampler holds the list).
    pub(crate) fn none() -> TaskList {
        TaskList {
            fd: -1,
            buf: Vec::new(),
            tids: Vec::new(),
        }
    }

    /// Reads the list again (from the start of the same open directory);
    /// false if it could not be read.
    pub(crate) fn read(&mut self) -> bool {
        if self.fd < 0 {
            return false;
        }
        self.tids.clear();
        // SAFETY: rewinds our open directory fd.
        if unsafe { libc::lseek(self.fd, 0, libc::SEEK_SET) } < 0 {
            return false;
        }
        loop {
            // SAFETY: the kernel writes at most `buf.len()` bytes of
            // `linux_dirent64` records into our buffer.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.fd,
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            };
            if n < 0 {
                return false;
            }
            if n == 0 {
                break;
            }
            parse_dirents(&self.buf[..n as usize], &mut self.tids);
        }
        self.tids.sort_unstable();
        true
    }

    /// The ids of the last `read`, sorted.
    pub(crate) fn tids(&self) -> &[i32] {
        &self.tids
    }
}

impl Drop for TaskList {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: our fd, closed once.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// The numeric names in a buffer of `linux_dirent64` records (`d_ino` u64,
/// `d_off` i64, `d_reclen` u16, `d_type` u8, then the NUL-terminated
/// name), appended to `out`; "." and ".." and anything not a number are
/// skipped.
fn parse_dirents(mut buf: &[u8], out: &mut Vec<i32>) {
    while buf.len() >= 19 {
        let reclen = u16::from_ne_bytes([buf[16], buf[17]]) as usize;
        if reclen < 19 || reclen > buf.len() {
            return;
        }
        let name = &buf[19..reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let mut tid: i64 = 0;
        let numeric = !name.is_empty()
            && name.len() <= 10
            && name.iter().all(|b| {
                tid = tid * 10 + (b.wrapping_sub(b'0')) as i64;
                b.is_ascii_digit()
            });
        if numeric && tid > 0 && tid <= i32::MAX as i64 {
            out.push(tid as i32);
        }
        buf = &buf[reclen..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirent(name: &str) -> Vec<u8> {
        let reclen = (19 + name.len() + 1).div_ceil(8) * 8;
        let mut b = vec![0u8; reclen];
        b[0..8].copy_from_slice(&7u64.to_ne_bytes());
        b[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
        b[18] = 4; // DT_DIR
        b[19..19 + name.len()].copy_from_slice(name.as_bytes());
        b
    }

    #[test]
    fn dirents_give_the_numeric_names() {
        let mut buf = Vec::new();
        for n in [".", "..", "123", "x1", "4567", "99999999999", "0"] {
            buf.extend(dirent(n));
        }
        let mut out = Vec::new();
        parse_dirents(&buf, &mut out);
        assert_eq!(out, vec![123, 4567]);
        // A record cut short ends the parse, no panic.
        out.clear();
        parse_dirents(&buf[..buf.len() - 3], &mut out);
        assert_eq!(out, vec![123, 4567]);
        parse_dirents(&buf[..10], &mut out);
    }

    #[test]
    fn the_task_list_has_every_thread_and_is_read_again() {
        let mut list = TaskList::open();
        assert!(list.read());
        let me = crate::sys::tid() as i32;
        assert!(list.tids().contains(&me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(crate::sys::tid() as i32).unwrap();
            let _ = done_rx.recv();
        });
        let other = rx.recv().unwrap();
        assert!(list.read());
        assert!(list.tids().contains(&other) && list.tids().contains(&me));
        drop(done_tx);
        t.join().unwrap();
        // The kernel lets go of a joined thread's entry a moment later.
        let since = std::time::Instant::now();
        while list.read() && list.tids().contains(&other) {
            assert!(since.elapsed() < std::time::Duration::from_secs(5));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(list.tids().contains(&me));
        assert!(list.tids().windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_bell_wakes_a_wait_and_clears() {
        let bell = Bell::new().unwrap();
        bell.ring();
        let t = std::time::Instant::now();
        bell.wait(5_000);
        assert!(t.elapsed() < std::time::Duration::from_secs(4));
        // Cleared: the next wait times out.
        let t = std::time::Instant::now();
        bell.wait(20);
        assert!(t.elapsed() >= std::time::Duration::from_millis(15));
    }
}
