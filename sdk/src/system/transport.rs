//! The connection to traced's producer socket: addresses (a Unix socket path,
//! `@abstract`, `host:port` TCP, `vsock://CID:PORT`), and frames (`u32`
//! little-endian length + `IPCFrame`), with the file descriptor traced may
//! pass along a Unix frame. TCP and vsock pass no descriptor: traced then
//! asks for chunks inside CommitData (`chunks::Memory::Emulated`).

#![forbid(unsafe_code)]

use super::shm;
use super::wire::MAX_FRAME;
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// How long one connection attempt over the network (TCP, vsock) may take:
/// an address nobody answers costs the connection thread this much per
/// try, never a recording thread.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// A VM socket (AF_VSOCK), through `socket2`: std has no vsock type.
    Vsock(Socket),
}

/// A producer socket address, in traced's forms (the spec's §2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Address<'a> {
    Path(&'a str),
    Abstract(&'a str),
    /// `host:port`, `[v6]:port`.
    Tcp(&'a str),
    Vsock {
        cid: u32,
        port: u32,
    },
}

const VSOCK_PREFIX: &str = "vsock://";

impl<'a> Address<'a> {
    /// Parses `addr`; only a malformed `vsock://` address is an error (any
    /// other string is a path, as for traced).
    fn parse(addr: &'a str) -> io::Result<Address<'a>> {
        if let Some(rest) = addr.strip_prefix(VSOCK_PREFIX) {
            return parse_vsock(rest).map_err(|why| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "malformed address {addr}: {why} (expected vsock://CID:PORT, both decimal)"
                    ),
                )
            });
        }
        if let Some(name) = addr.strip_prefix('@') {
            return Ok(Address::Abstract(name));
        }
        let tcp = !addr.starts_with('/')
            && addr.rsplit_once(':').is_some_and(|(_, port)| {
                !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
            });
        Ok(if tcp {
            Address::Tcp(addr)
        } else {
            Address::Path(addr)
        })
    }
}

/// `CID:PORT` of a vsock address, or why not.
fn parse_vsock(rest: &str) -> Result<Address<'static>, String> {
    let (cid, port) = rest.split_once(':').ok_or_else(|| "no port".to_string())?;
    let number = |what: &str, s: &str| -> Result<u32, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{what} {s:?} is not a decimal number"));
        }
        s.parse()
            .map_err(|_| format!("{what} {s} is out of range (at most {})", u32::MAX))
    };
    if cid == "-1" {
        // traced listens on `vsock://-1:PORT`; a producer must name a machine.
        return Err(
            "CID -1 (any) is for listening; connect to the service's CID \
                    (2: the host, 1: this machine)"
                .into(),
        );
    }
    Ok(Address::Vsock {
        cid: number("CID", cid)?,
        port: number("port", port)?,
    })
}

/// A stream socket connected to `cid:port` over vsock, within the timeout.
fn connect_vsock(cid: u32, port: u32) -> io::Result<Socket> {
    let socket = Socket::new(Domain::VSOCK, Type::STREAM, None).map_err(|e| {
        if e.raw_os_error() == Some(libc::EAFNOSUPPORT) {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel offers no vsock (AF_VSOCK) sockets",
            )
        } else {
            e
        }
    })?;
    socket.connect_timeout(&SockAddr::vsock(cid, port), CONNECT_TIMEOUT)?;
    Ok(socket)
}

impl Stream {
    pub(crate) fn connect(addr: &str) -> io::Result<Stream> {
        match Address::parse(addr)? {
            Address::Vsock { cid, port } => Ok(Stream::Vsock(connect_vsock(cid, port)?)),
            Address::Tcp(addr) => {
                let target = addr
                    .to_socket_addrs()?
                    .next()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
                let s = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Address::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                Ok(Stream::Unix(UnixStream::connect_addr(&a)?))
            }
            Address::Path(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
        }
    }

    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Vsock(s) => Stream::Vsock(s.try_clone()?),
        })
    }

    /// Bounds every send: traced drops producers whose socket stays full,
    /// and we never want a writer to wait long on it.
    pub(crate) fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(Some(t)),
            Stream::Tcp(s) => s.set_write_timeout(Some(t)),
            Stream::Vsock(s) => s.set_write_timeout(Some(t)),
        }
    }

    pub(crate) fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tcp(s) => s.write_all(buf),
            Stream::Vsock(s) => s.write_all(buf),
        }
    }

    /// Ends the connection both ways (wakes a blocked reader).
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Vsock(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
        match self {
            Stream::Unix(s) => shm::recv_with_fd(s, buf),
            Stream::Tcp(s) => Ok((s.read(buf)?, None)),
            Stream::Vsock(s) => Ok((s.read(buf)?, None)),
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
        let p = |a| Address::parse(a).unwrap();
        assert_eq!(p("127.0.0.1:32278"), Address::Tcp("127.0.0.1:32278"));
        assert_eq!(p("[::1]:32278"), Address::Tcp("[::1]:32278"));
        assert_eq!(p("localhost:1"), Address::Tcp("localhost:1"));
        assert_eq!(
            p("/tmp/perfetto-producer"),
            Address::Path("/tmp/perfetto-producer")
        );
        assert_eq!(p("@traced-p-12"), Address::Abstract("traced-p-12"));
        assert_eq!(p("relative-path"), Address::Path("relative-path"));
        assert_eq!(p("/run/a:1"), Address::Path("/run/a:1"));
        assert_eq!(
            p("vsock://2:32278"),
            Address::Vsock {
                cid: 2,
                port: 32278
            }
        );
        assert_eq!(
            p("vsock://4294967295:0"),
            Address::Vsock {
                cid: u32::MAX,
                port: 0
            }
        );
    }

    #[test]
    fn malformed_vsock_addresses_say_what_is_wrong() {
        for (addr, why) in [
            ("vsock://", "no port"),
            ("vsock://2", "no port"),
            ("vsock://:1", "CID \"\" is not a decimal number"),
            ("vsock://2:", "port \"\" is not a decimal number"),
            ("vsock://x:1", "CID \"x\" is not a decimal number"),
            ("vsock://2:p", "port \"p\" is not a decimal number"),
            ("vsock://+2:1", "CID \"+2\" is not a decimal number"),
            ("vsock://2:1:3", "port \"1:3\" is not a decimal number"),
            ("vsock://4294967296:1", "CID 4294967296 is out of range"),
            ("vsock://2:99999999999", "port 99999999999 is out of range"),
            ("vsock://-1:1", "CID -1 (any) is for listening"),
        ] {
            let e = Address::parse(addr).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{addr}");
            let text = e.to_string();
            assert!(text.contains(why), "{addr}: {text}");
            assert!(text.contains(addr), "{addr}: {text}");
            assert!(text.contains("vsock://CID:PORT"), "{addr}: {text}");
            // Connecting fails the same way, before any socket is made.
            let e = Stream::connect(addr).err().unwrap();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{addr}");
        }
    }

    #[test]
    fn a_vsock_address_nobody_listens_on_fails_within_the_connect_timeout() {
        // Whatever this machine offers: no vsock at all (a clear
        // "Unsupported"), vsock without a local loopback (a timeout, or
        // "No such device"), or a loopback with no listener (refused, reset).
        let start = std::time::Instant::now();
        let e = Stream::connect("vsock://1:47913")
            .err()
            .expect("nobody listens");
        let took = start.elapsed();
        assert!(
            took < CONNECT_TIMEOUT + Duration::from_millis(500),
            "took {took:?}: {e}"
        );
        if e.kind() == io::ErrorKind::Unsupported {
            assert!(e.to_string().contains("no vsock"), "{e}");
        }
    }
}
