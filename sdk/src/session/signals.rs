//! Opt-in finishing of the trace on SIGINT and SIGTERM.
//!
//! A signal handler may only do async-signal-safe work, so the handler writes
//! the signal number to a pipe and returns. A watcher thread reads it, stops
//! the session (drain, encode, write, close the file), then restores the
//! signal's default disposition and raises it again, so the process ends the
//! way it would have without ringtrace (exit status, core dump policy, parent
//! notification all unchanged).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

/// Write end of the self-pipe, read by the handler.
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
static INSTALL: Once = Once::new();

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; `byte` is a valid 1-byte buffer.
        // If the pipe is full a signal is already pending for the watcher.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// Installs the handlers once per process; `finish` runs on the watcher thread.
pub(crate) fn install(finish: fn()) -> std::io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| result = install_now(finish));
    result
}

fn install_now(finish: fn()) -> std::io::Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    PIPE_WRITE.store(write_fd, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("ringtrace-signals".into())
        .spawn(move || loop {
            let mut byte = 0u8;
            // SAFETY: `byte` is a valid 1-byte buffer; `read_fd` stays open for
            // the life of the process (never closed).
            let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                finish();
                let sig = byte as libc::c_int;
                // SAFETY: restoring SIG_DFL and raising a standard signal has no
                // memory-safety preconditions.
                unsafe {
                    libc::signal(sig, libc::SIG_DFL);
                    libc::raise(sig);
                }
            } else if n == 0 {
                return;
            }
        })?;
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
        // `on_signal` has the signature sa_handler expects and is
        // async-signal-safe (one write(2)).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}
