//! A small HTTP/1.1 client over `std::net::TcpStream`, enough for OTLP/HTTP:
//! one POST per connection (`Connection: close`), every step bounded by a
//! deadline, the response's status, `Retry-After` and body (bounded) read.
//! Written here so that the SDK's normal build pulls in no async runtime or
//! HTTP stack for the exporter; `https` is not spoken (a local collector or
//! agent takes plain HTTP).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// An `http://host[:port]/path` URL, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Url {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: String,
}

impl Url {
    /// Parses `url`; the error names what is wrong.
    pub(crate) fn parse(url: &str) -> Result<Url, String> {
        let rest = if let Some(r) = url.strip_prefix("http://") {
            r
        } else if url.starts_with("https://") {
            return Err(format!(
                "{url:?}: https is not supported by ringtrace's OTLP exporter (use a collector's \
                 plain http endpoint, e.g. a local agent)"
            ));
        } else {
            return Err(format!("{url:?} is not an http:// URL"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(h) = authority.strip_prefix('[') {
            // [v6]:port
            let end = h
                .find(']')
                .ok_or_else(|| format!("{url:?}: unclosed '[' in the host"))?;
            let port = h[end + 1..].strip_prefix(':');
            (format!("[{}]", &h[..end]), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '@') {
            return Err(format!("{url:?}: no valid host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("{url:?}: the port {p:?} is not a number below 65536"))?,
        };
        if path.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!(
                "{url:?}: the path has spaces or control characters"
            ));
        }
        Ok(Url {
            host,
            port,
            path: path.to_string(),
        })
    }
}

/// A response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// `Retry-After`, as a wait from now.
    pub(crate) retry_after: Option<Duration>,
    pub(crate) body: Vec<u8>,
}

/// Headers of a response larger than this are refused.
const MAX_HEAD: usize = 64 * 1024;
/// A response body is read up to this much (OTLP's are a few bytes).
const MAX_BODY: usize = 1024 * 1024;

/// POSTs `body` to `url` with `headers`, all of it done by `deadline`.
pub(crate) fn post(
    url: &Url,
    headers: &[(String, String)],
    body: &[u8],
    deadline: Instant,
) -> std::io::Result<Response> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "deadline passed"))
    };
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (host, url.port).to_socket_addrs()?.collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address for the host");
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut s = stream.ok_or(last)?;
    let _ = s.set_nodelay(true);
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: ringtrace/{}\r\nConnection: close\r\n\
         Content-Length: {}\r\n",
        url.path,
        url.host,
        url.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    // Written in pieces, the deadline checked between them: a receiver that
    // reads slowly holds the exporter no longer than the deadline.
    for piece in [head.as_bytes(), body] {
        for chunk in piece.chunks(16 * 1024) {
            s.set_write_timeout(Some(left()?))?;
            s.write_all(chunk)?;
        }
    }
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(bad("response headers over 64 KiB"));
        }
        s.set_read_timeout(Some(left()?))?;
        let n = s.read(&mut tmp)?;
        if n == 0 {
            return Err(bad("connection closed before the response's headers"));
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| bad("no HTTP status line"))?;
    let mut retry_after = None;
    let mut length = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("retry-after") {
            retry_after = parse_retry_after(v, SystemTime::now());
        } else if k.eq_ignore_ascii_case("content-length") {
            length = v.parse::<usize>().ok();
        }
    }
    let mut body = buf[head_end..].to_vec();
    let want = length.unwrap_or(MAX_BODY).min(MAX_BODY);
    while body.len() < want {
        let Ok(t) = left() else { break };
        s.set_read_timeout(Some(t))?;
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&tmp[..n]),
        }
    }
    body.truncate(want);
    Ok(Response {
        status,
        retry_after,
        body,
    })
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// `Retry-After`: delay-seconds, or an HTTP date (IMF-fixdate,
/// `Sun, 06 Nov 1994 08:49:37 GMT`) as a wait from `now`.
pub(crate) fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let p: Vec<&str> = v.split_whitespace().collect();
    if p.len() != 6 || p[5] != "GMT" {
        return None;
    }
    let day: u64 = p[1].parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == p[2])? as u64
        + 1;
    let year: i64 = p[3].parse().ok()?;
    let t: Vec<u64> = p[4].split(':').filter_map(|x| x.parse().ok()).collect();
    if t.len() != 3 || !(1..=31).contains(&day) || t[0] > 23 || t[1] > 59 || t[2] > 60 {
        return None;
    }
    // Days from 1970-01-01 to the civil date (proleptic Gregorian).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m as i64 + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + (t[0] * 3600 + t[1] * 60 + t[2]) as i64;
    let at = UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(secs).ok()?))?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        let u = Url::parse("http://127.0.0.1:4318/v1/traces").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 4318, "/v1/traces")
        );
        assert_eq!(Url::parse("http://collector").unwrap().port, 80);
        assert_eq!(Url::parse("http://[::1]:9/x").unwrap().host, "[::1]");
        for bad in [
            "https://x/v1",
            "ftp://x",
            "http://:80/",
            "http://x:99999/",
            "http://x/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:40 GMT", now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:30 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(
            parse_retry_after("Sun, 99 Nov 1994 08:49:40 GMT", now),
            None
        );
    }
}
