//! ZIP writing (stored or deflate) and reading.
//!
//! # Layout written
//!
//! For each member: a local file header, then the data; after the last
//! member, the central directory (one entry per member) and the
//! end-of-central-directory record. All integers little-endian.
//!
//! ```text
//! local header   50 4b 03 04 | version needed (u16: 10 stored, 20 deflate)
//!                | flags (u16: bit 11 = UTF-8 name when not ASCII) | method (u16: 0 or 8)
//!                | DOS time, date (u16, u16) | CRC-32 | compressed size | size (u32 each)
//!                | name length (u16) | extra length (u16 = 0) | name
//! central entry  50 4b 01 02 | version made by (u16: 3 << 8 | 20, Unix) | the local
//!                header's fields | comment length, disk, internal attributes (u16 = 0)
//!                | external attributes (u32: 0o100644 << 16) | local header offset (u32) | name
//! end record     50 4b 05 06 | disk, CD disk (u16 = 0) | entries on disk, entries (u16)
//!                | CD size, CD offset (u32) | comment length (u16 = 0)
//! ```
//!
//! Sizes and the CRC are in the local header (no data descriptor, flag bit 3
//! clear), so readers that walk local headers, as trace_processor does, read
//! every entry; no encryption; "version needed" ≤ 20. No ZIP64: members and
//! the archive must stay under 4 GiB (use TAR beyond that).
//!
//! Compression is `flate2` (raw deflate, miniz_oxide backend) and the CRC is
//! `crc32fast`: both small, widely used crates, rather than a hand-written
//! deflate whose bugs would corrupt traces.

use super::ArchiveError;
use std::io::{Read, Write};

/// How ZIP members are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZipMethod {
    /// Uncompressed (method 0).
    Stored,
    /// Deflate (method 8), the default: traces compress well.
    #[default]
    Deflate,
}

struct Entry {
    name: Vec<u8>,
    method: u16,
    crc: u32,
    csize: u32,
    size: u32,
    offset: u32,
    flags: u16,
}

pub(crate) struct ZipWriter<W: Write> {
    out: W,
    pos: u64,
    entries: Vec<Entry>,
    time: u16,
    date: u16,
}

impl<W: Write> ZipWriter<W> {
    pub(crate) fn new(out: W, mtime: u64) -> Self {
        let (time, date) = dos_time(mtime);
        ZipWriter {
            out,
            pos: 0,
            entries: Vec::new(),
            time,
            date,
        }
    }

    pub(crate) fn append(
        &mut self,
        name: &str,
        data: &[u8],
        method: ZipMethod,
    ) -> Result<(), ArchiveError> {
        let too_large = || ArchiveError::TooLarge {
            member: name.to_owned(),
            limit: "ZIP without ZIP64 holds less than 4 GiB; use TAR",
        };
        let size = u32::try_from(data.len()).map_err(|_| too_large())?;
        let offset = u32::try_from(self.pos).map_err(|_| too_large())?;
        let crc = crc32fast::hash(data);
        let compressed;
        let (method, body): (u16, &[u8]) = match method {
            ZipMethod::Stored => (0, data),
            ZipMethod::Deflate => {
                let mut enc =
                    flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                enc.write_all(data).map_err(|e| ArchiveError::io(None, e))?;
                compressed = enc.finish().map_err(|e| ArchiveError::io(None, e))?;
                (8, &compressed)
            }
        };
        let csize = u32::try_from(body.len()).map_err(|_| too_large())?;
        let flags = if name.is_ascii() { 0 } else { 1 << 11 };
        let entry = Entry {
            name: name.as_bytes().to_vec(),
            method,
            crc,
            csize,
            size,
            offset,
            flags,
        };
        let mut h = Vec::with_capacity(30 + entry.name.len());
        h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        h.extend_from_slice(&version_needed(method).to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&method.to_le_bytes());
        h.extend_from_slice(&self.time.to_le_bytes());
        h.extend_from_slice(&self.date.to_le_bytes());
        h.extend_from_slice(&crc.to_le_bytes());
        h.extend_from_slice(&csize.to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h.extend_from_slice(&(entry.name.len() as u16).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(&entry.name);
        self.write(&h)?;
        self.write(body)?;
        self.entries.push(entry);
        Ok(())
    }

    fn write(&mut self, b: &[u8]) -> Result<(), ArchiveError> {
        self.out
            .write_all(b)
            .map_err(|e| ArchiveError::io(None, e))?;
        self.pos += b.len() as u64;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<W, ArchiveError> {
        let too_large = || ArchiveError::TooLarge {
            member: "(archive)".into(),
            limit: "ZIP without ZIP64 holds less than 4 GiB and 65 535 members; use TAR",
        };
        let cd_start = u32::try_from(self.pos).map_err(|_| too_large())?;
        let count = u16::try_from(self.entries.len()).map_err(|_| too_large())?;
        let mut cd = Vec::new();
        for e in &self.entries {
            cd.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            cd.extend_from_slice(&((3u16 << 8) | 20).to_le_bytes());
            cd.extend_from_slice(&version_needed(e.method).to_le_bytes());
            cd.extend_from_slice(&e.flags.to_le_bytes());
            cd.extend_from_slice(&e.method.to_le_bytes());
            cd.extend_from_slice(&self.time.to_le_bytes());
            cd.extend_from_slice(&self.date.to_le_bytes());
            cd.extend_from_slice(&e.crc.to_le_bytes());
            cd.extend_from_slice(&e.csize.to_le_bytes());
            cd.extend_from_slice(&e.size.to_le_bytes());
            cd.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            cd.extend_from_slice(&[0u8; 8]); // extra len, comment len, disk, internal attrs
            cd.extend_from_slice(&(0o100644u32 << 16).to_le_bytes());
            cd.extend_from_slice(&e.offset.to_le_bytes());
            cd.extend_from_slice(&e.name);
        }
        let cd_len = u32::try_from(cd.len()).map_err(|_| too_large())?;
        cd.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        cd.extend_from_slice(&[0u8; 4]);
        cd.extend_from_slice(&count.to_le_bytes());
        cd.extend_from_slice(&count.to_le_bytes());
        cd.extend_from_slice(&cd_len.to_le_bytes());
        cd.extend_from_slice(&cd_start.to_le_bytes());
        cd.extend_from_slice(&0u16.to_le_bytes());
        self.write(&cd)?;
        self.out.flush().map_err(|e| ArchiveError::io(None, e))?;
        Ok(self.out)
    }
}

fn version_needed(method: u16) -> u16 {
    if method == 8 {
        20
    } else {
        10
    }
}

/// MS-DOS time and date of `unix` seconds (UTC; DOS time has no zone), or
/// 1980-01-01 for earlier times.
fn dos_time(unix: u64) -> (u16, u16) {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let (y, m, d) = civil_from_days(days);
    if y < 1980 {
        return (0, (1 << 5) | 1);
    }
    let time = (((secs / 3600) << 11) | ((secs % 3600 / 60) << 5) | ((secs % 60) / 2)) as u16;
    let date = (((y - 1980).min(127) as u16) << 9) | ((m as u16) << 5) | d as u16;
    (time, date)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn u16_at(d: &[u8], at: usize) -> Result<u16, ArchiveError> {
    d.get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| ArchiveError::Corrupt("ZIP record runs past the end".into()))
}

fn u32_at(d: &[u8], at: usize) -> Result<u32, ArchiveError> {
    d.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| ArchiveError::Corrupt("ZIP record runs past the end".into()))
}

/// The file members of a ZIP archive, in central-directory order; stored and
/// deflate only, CRCs checked. Directory entries are skipped. Deflated
/// members inflate to at most `limit` bytes in all, and never to more than
/// their declared size: memory follows what the data really holds, not what
/// its headers claim.
pub(crate) fn read(data: &[u8], limit: u64) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    let mut left = limit;
    let eocd = (0..data.len().saturating_sub(21))
        .rev()
        .take(65_557)
        .find(|&i| data[i..].starts_with(&[0x50, 0x4b, 0x05, 0x06]))
        .ok_or_else(|| ArchiveError::Corrupt("no ZIP end-of-central-directory record".into()))?;
    let count = u16_at(data, eocd + 10)? as usize;
    let mut at = u32_at(data, eocd + 16)? as usize;
    // Each central entry takes 46 bytes at least: a count beyond that is a lie.
    let mut out = Vec::with_capacity(count.min(data.len() / 46));
    for _ in 0..count {
        if u32_at(data, at)? != 0x0201_4b50 {
            return Err(ArchiveError::Corrupt(format!(
                "bad ZIP central directory entry at byte {at}"
            )));
        }
        let flags = u16_at(data, at + 8)?;
        let method = u16_at(data, at + 10)?;
        let crc = u32_at(data, at + 16)?;
        let csize = u32_at(data, at + 20)? as usize;
        let size = u32_at(data, at + 24)? as usize;
        let name_len = u16_at(data, at + 28)? as usize;
        let extra_len = u16_at(data, at + 30)? as usize;
        let comment_len = u16_at(data, at + 32)? as usize;
        let local = u32_at(data, at + 42)? as usize;
        let name_bytes = data
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| ArchiveError::Corrupt("ZIP name runs past the end".into()))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        at += 46 + name_len + extra_len + comment_len;
        if flags & 1 != 0 {
            return Err(ArchiveError::Corrupt(format!(
                "ZIP member '{name}' is encrypted"
            )));
        }
        if name.ends_with('/') {
            continue;
        }
        if u32_at(data, local)? != 0x0403_4b50 {
            return Err(ArchiveError::Corrupt(format!(
                "bad ZIP local header of '{name}'"
            )));
        }
        let start =
            local + 30 + u16_at(data, local + 26)? as usize + u16_at(data, local + 28)? as usize;
        let body = data.get(start..start + csize).ok_or_else(|| {
            ArchiveError::Corrupt(format!("ZIP member '{name}' runs past the end"))
        })?;
        let bytes = match method {
            0 => body.to_vec(),
            8 => {
                if size as u64 > left {
                    return Err(ArchiveError::UnpackLimit {
                        member: name,
                        limit,
                    });
                }
                // Deflate expands 1032 times at most: preallocate no more
                // than the data can hold; read one byte past the declared
                // size to catch a member larger than its header says.
                let mut v = Vec::with_capacity(size.min(csize.saturating_mul(1032)));
                flate2::read::DeflateDecoder::new(body)
                    .take(size as u64 + 1)
                    .read_to_end(&mut v)
                    .map_err(|e| ArchiveError::Corrupt(format!("ZIP member '{name}': {e}")))?;
                left -= (v.len() as u64).min(left);
                v
            }
            m => {
                return Err(ArchiveError::Corrupt(format!(
                    "ZIP member '{name}' uses method {m} (only stored and deflate)"
                )))
            }
        };
        if bytes.len() != size || crc32fast::hash(&bytes) != crc {
            return Err(ArchiveError::Corrupt(format!(
                "ZIP member '{name}': size or CRC-32 mismatch"
            )));
        }
        out.push((name, bytes));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_methods() {
        let mut w = ZipWriter::new(Vec::new(), 1_700_000_000);
        w.append("a.pftrace", &[0x0a; 1000], ZipMethod::Deflate)
            .unwrap();
        w.append("é.json", b"[{\"a\":1}]", ZipMethod::Stored)
            .unwrap();
        let bytes = w.finish().unwrap();
        assert!(bytes.starts_with(b"PK\x03\x04"));
        let m = read(&bytes, u64::MAX).unwrap();
        assert_eq!(m[0], ("a.pftrace".to_string(), vec![0x0a; 1000]));
        assert_eq!(m[1], ("é.json".to_string(), b"[{\"a\":1}]".to_vec()));
    }

    #[test]
    fn dos_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        let (t, d) = dos_time(1_704_067_200 + 3600 + 62); // 2024-01-01 01:01:02
        assert_eq!(d, (44 << 9) | (1 << 5) | 1);
        assert_eq!(t, (1 << 11) | (1 << 5) | 1);
    }
}
