//! The connection to traced's producer socket: addresses (a Unix socket path,
//! `@abstract`, `host:port` TCP), and frames (`u32` little-endian length +
//! `IPCFrame`), with the file descriptor traced may pass along a Unix frame.

use super::shm;
use super::wire::MAX_FRAME;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Where traced's producer socket is: `PERFETTO_PRODUCER_SOCK_NAME`, else
/// `/run/perfetto/traced-producer.sock` if `/run/perfetto` can be searched,
/// else `/tmp/perfetto-producer` (traced's own defaults on Linux).
pub(crate) fn default_address() -> String {
    if let Some(v) = std::env::var_os("PERFETTO_PRODUCER_SOCK_NAME").filter(|v| !v.is_empty()) {
        return v.to_string_lossy().into_owned();
    }
    // Looking up an entry of a directory needs search permission on it, as
    // traced's clients check with access(X_OK).
    if std::path::Path::new("/run/perfetto/.").metadata().is_ok() {
        "/run/perfetto/traced-producer.sock".into()
    } else {
        "/tmp/perfetto-producer".into()
    }
}

/// A connected producer socket.
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// Whether `addr` names a TCP endpoint (`host:port`, `[v6]:port`).
fn is_tcp(addr: &str) -> bool {
    !addr.starts_with('/')
        && !addr.starts_with('@')
        && addr
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

impl Stream {
    pub(crate) fn connect(addr: &str) -> io::Result<Stream> {
        if addr.starts_with("vsock://") {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "vsock addresses are not supported; use host:port (TCP) or traced_relay",
            ));
        }
        if is_tcp(addr) {
            let target = addr
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
            let s = TcpStream::connect_timeout(&target, Duration::from_secs(2))?;
            s.set_nodelay(true)?;
            return Ok(Stream::Tcp(s));
        }
        if let Some(name) = addr.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            return Ok(Stream::Unix(UnixStream::connect_addr(&a)?));
        }
        Ok(Stream::Unix(UnixStream::connect(addr)?))
    }

    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    /// Bounds every send: traced drops producers whose socket stays full,
    /// and we never want a writer to wait long on it.
    pub(crate) fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(Some(t)),
            Stream::Tcp(s) => s.set_write_timeout(Some(t)),
        }
    }

    pub(crate) fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tcp(s) => s.write_all(buf),
        }
    }

    /// Ends the connection both ways (wakes a blocked reader).
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
        match self {
            Stream::Unix(s) => shm::recv_with_fd(s, buf),
            Stream::Tcp(s) => Ok((s.read(buf)?, None)),
        }
    }
}

/// Reads whole frames, keeping the last file descriptor received.
pub(crate) struct FrameReader {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    fd: Option<OwnedFd>,
}

impl FrameReader {
    pub(crate) fn new(stream: Stream) -> FrameReader {
        FrameReader {
            stream,
            buf: Vec::with_capacity(MAX_FRAME),
            start: 0,
            fd: None,
        }
    }

    /// The descriptor that came with the frames read so far, if any.
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }

    /// The next frame's payload (without its length), or an error at end of
    /// stream or on a frame over the protocol's limit.
    pub(crate) fn next(&mut self) -> io::Result<&[u8]> {
        loop {
            let avail = &self.buf[self.start..];
            if avail.len() >= 4 {
                let len = u32::from_le_bytes(avail[..4].try_into().unwrap()) as usize;
                if len + 4 > MAX_FRAME {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("frame of {len} bytes"),
                    ));
                }
                if avail.len() >= 4 + len {
                    let from = self.start + 4;
                    self.start += 4 + len;
                    return Ok(&self.buf[from..from + len]);
                }
            }
            // Move the partial frame to the front, then read more.
            self.buf.drain(..self.start);
            self.start = 0;
            let have = self.buf.len();
            self.buf.resize(have + MAX_FRAME, 0);
            let (n, fd) = self.stream.read(&mut self.buf[have..])?;
            self.buf.truncate(have + n);
            if let Some(fd) = fd {
                self.fd = Some(fd);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "traced closed the connection",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_forms() {
        assert!(is_tcp("127.0.0.1:32278"));
        assert!(is_tcp("[::1]:32278"));
        assert!(is_tcp("localhost:1"));
        assert!(!is_tcp("/tmp/perfetto-producer"));
        assert!(!is_tcp("@traced-p-12"));
        assert!(!is_tcp("relative-path"));
    }
}
