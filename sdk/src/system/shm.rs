//! The shared memory buffer (SMB) traced gives a producer: receiving its
//! file descriptor (`SCM_RIGHTS`), mapping it, and word access to it.
//!
//! This is the only module of `system` with `unsafe`. Every access to the
//! mapping goes through an atomic (`AtomicU32`/`AtomicU16`), so the other
//! process writing the same bytes at any moment can never make our accesses
//! a data race; only the mapping's lifetime and bounds need proofs.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU16, AtomicU32};

/// Reads from `stream` into `buf` like `read`, also taking one file
/// descriptor passed with the bytes, if any (extra descriptors are closed).
pub(crate) fn recv_with_fd(
    stream: &UnixStream,
    buf: &mut [u8],
) -> io::Result<(usize, Option<OwnedFd>)> {
    // Room for a few descriptors, so the kernel never truncates the control
    // message (it would drop the fd and set MSG_CTRUNC).
    const MAX_FDS: usize = 4;
    let mut control = [0u64; 16]; // 128 bytes, 8-aligned like `cmsghdr`
                                  // SAFETY: CMSG_SPACE only computes a size from its argument.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<libc::c_int>()) as u32) };
    debug_assert!(space as usize <= std::mem::size_of_val(&control));
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero `msghdr` is a valid value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points to one iovec describing `buf` (valid for writes of
    // `buf.len()` bytes) and to `control` (valid for `space` bytes, checked
    // above), all alive for the call; the socket fd is open (borrowed from
    // `stream`).
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: `msg` was filled by a successful recvmsg: CMSG_FIRSTHDR and
    // CMSG_NXTHDR walk the control buffer within `msg_controllen`, which the
    // kernel set to at most `space` bytes of `control`.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points to a header inside `control`
        // (see above), readable and aligned for `cmsghdr`.
        let (level, kind, len) =
            unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN only computes a size.
            let header = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = len.saturating_sub(header) / std::mem::size_of::<libc::c_int>();
            // SAFETY: an SCM_RIGHTS message carries `count` ints right after
            // its header (CMSG_DATA), inside the control buffer; they may be
            // unaligned, hence read_unaligned.
            let data = unsafe { libc::CMSG_DATA(cmsg) } as *const libc::c_int;
            for i in 0..count {
                // SAFETY: `i < count`, within this control message (above).
                let raw = unsafe { data.add(i).read_unaligned() };
                // SAFETY: the kernel just installed `raw` in our fd table for
                // us; nothing else owns it, so OwnedFd may close it.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                if fd.is_none() {
                    fd = Some(owned);
                } // else dropped: closed
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR; returns null past the last header.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok((n as usize, fd))
}

/// A mapped SMB: `pages` pages of `page_size` bytes.
pub(crate) struct SharedMemory {
    base: *mut u8,
    size: usize,
    page_size: usize,
    // Keeps the descriptor open as long as the mapping (not needed by mmap,
    // but it makes the memory's identity obvious in /proc/self/fd).
    _fd: OwnedFd,
}

// SAFETY: the mapping is plain memory accessed only through atomics (see the
// module doc); the raw pointer is what stops the auto traits.
unsafe impl Send for SharedMemory {}
// SAFETY: as for Send: shared access goes through atomics only.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// Maps the SMB in `fd` with pages of `page_size` bytes.
    pub(crate) fn map(fd: OwnedFd, page_size: usize) -> io::Result<SharedMemory> {
        let size = std::fs::File::from(fd.try_clone()?).metadata()?.len() as usize;
        if page_size < 4096
            || !page_size.is_power_of_two()
            || size == 0
            || !size.is_multiple_of(page_size)
            || size > 64 << 20
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared memory of {size} bytes with {page_size}-byte pages is not valid"),
            ));
        }
        // A memfd that can still be shrunk could be cut under the mapping and
        // turn our next access into SIGBUS: traced seals its own (SHRINK,
        // GROW, SEAL), and so do Perfetto's clients require. A file that
        // cannot carry seals (traced's fallback, an unlinked temporary file,
        // where F_GET_SEALS fails) is taken as traced's clients take it.
        // SAFETY: F_GET_SEALS on an open fd only reads its seals.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals >= 0 && seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shared memory that can be shrunk (no F_SEAL_SHRINK seal) is not mapped",
            ));
        }
        // SAFETY: a fresh shared read/write mapping of `size` bytes of an open
        // fd; no existing memory is affected (addr is null).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMemory {
            base: base.cast(),
            size,
            page_size,
            _fd: fd,
        })
    }

    pub(crate) fn pages(&self) -> usize {
        self.size / self.page_size
    }

    pub(crate) fn page_size(&self) -> usize {
        self.page_size
    }

    /// The 32-bit word at byte `offset` (4-aligned, inside the mapping).
    pub(crate) fn word(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= self.size,
            "SMB offset {offset}"
        );
        // SAFETY: `base + offset` is inside the mapping (asserted), 4-aligned
        // (mmap returns page-aligned memory; offset asserted), and the mapping
        // lives as long as `self`, which the returned reference borrows.
        // Memory shared with another process is only touched atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(offset).cast()) }
    }

    /// The 16-bit word at byte `offset` (2-aligned, inside the mapping).
    pub(crate) fn half(&self, offset: usize) -> &AtomicU16 {
        assert!(
            offset.is_multiple_of(2) && offset + 2 <= self.size,
            "SMB offset {offset}"
        );
        // SAFETY: as in `word`, for 2 bytes and 2-alignment.
        unsafe { AtomicU16::from_ptr(self.base.add(offset).cast()) }
    }
}

#[cfg(test)]
impl SharedMemory {
    /// A sealed 64 KiB memfd mapped in 4 KiB pages, as traced gives one.
    pub(crate) fn sealed_for_test() -> SharedMemory {
        let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        SharedMemory::map(tests::memfd(sealed), 4096).expect("a sealed memfd maps")
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: `base`/`size` are exactly the mapping made in `map`; no
        // reference into it outlives `self` (they borrow it).
        unsafe {
            libc::munmap(self.base.cast(), self.size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A 64 KiB memfd that accepts seals, with `seals` added.
    pub(super) fn memfd(seals: libc::c_int) -> OwnedFd {
        // SAFETY: memfd_create with a NUL-terminated name; the fd it returns
        // is owned by the OwnedFd alone.
        let fd = unsafe {
            let fd = libc::memfd_create(
                c"rt-test".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            );
            assert!(fd >= 0, "{}", io::Error::last_os_error());
            OwnedFd::from_raw_fd(fd)
        };
        std::fs::File::from(fd.try_clone().unwrap())
            .set_len(64 << 10)
            .unwrap();
        if seals != 0 {
            // SAFETY: F_ADD_SEALS on the fd just made.
            assert_eq!(
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) },
                0
            );
        }
        fd
    }

    #[test]
    fn a_memfd_that_can_shrink_is_refused() {
        let err = SharedMemory::map(memfd(0), 4096).err().expect("refused");
        assert!(err.to_string().contains("F_SEAL_SHRINK"), "{err}");
        let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        assert!(SharedMemory::map(memfd(sealed), 4096).is_ok());
    }
}
