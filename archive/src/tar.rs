//! TAR (POSIX ustar) writing and reading.
//!
//! # Layout written
//!
//! Each member is a 512-byte header followed by its data, padded with zeros
//! to a multiple of 512; the archive ends with two zero blocks and is padded
//! to a multiple of 10 240 bytes (the 20-block record `tar` uses). Header
//! fields (offsets in bytes, numbers in octal ASCII, NUL-terminated):
//!
//! | offset | size | field | written |
//! | --- | --- | --- | --- |
//! | 0 | 100 | name | the member name (≤ 99 bytes, see below) |
//! | 100 | 8 | mode | `0000644` |
//! | 108 | 8 / 8 | uid / gid | `0000000` |
//! | 124 | 12 | size | data length (< 8 GiB) |
//! | 136 | 12 | mtime | seconds since the epoch |
//! | 148 | 8 | chksum | sum of the header's bytes, this field counted as spaces: 6 digits, NUL, space |
//! | 156 | 1 | typeflag | `'0'` (regular file) |
//! | 257 | 6 + 2 | magic, version | `"ustar\0"`, `"00"` |
//! | 265 | 32 / 32 | uname / gname | `ringtrace` |
//!
//! Names are kept to 99 bytes in the `name` field: trace_processor ignores
//! PAX long names, and the Perfetto UI itself writes names of at most 99
//! bytes. The reader accepts what trace_processor accepts: ustar and GNU
//! headers, the ustar `prefix`, GNU long names (`'L'`), and skips PAX headers,
//! directories and links.

use super::ArchiveError;
use std::io::{self, Write};

const BLOCK: usize = 512;
const RECORD: u64 = 10_240;
/// Longest member name written.
pub(crate) const MAX_NAME: usize = 99;
/// The size field holds 11 octal digits.
pub(crate) const MAX_SIZE: u64 = (1 << 33) - 1;

/// Writes members one after the other.
pub(crate) struct TarWriter<W: Write> {
    out: W,
    written: u64,
    mtime: u64,
}

impl<W: Write> TarWriter<W> {
    pub(crate) fn new(out: W, mtime: u64) -> Self {
        TarWriter {
            out,
            written: 0,
            mtime,
        }
    }

    /// Appends one regular file. The caller has checked the name and size.
    pub(crate) fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        let header = header(name, data.len() as u64, self.mtime);
        self.out.write_all(&header)?;
        self.out.write_all(data)?;
        let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
        self.out.write_all(&[0u8; BLOCK][..pad])?;
        self.written += (BLOCK + data.len() + pad) as u64;
        Ok(())
    }

    /// Writes the end-of-archive blocks and the record padding.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        let end = self.written + 2 * BLOCK as u64;
        let total = end.div_ceil(RECORD) * RECORD;
        let zeros = vec![0u8; (total - self.written) as usize];
        self.out.write_all(&zeros)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let s = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
}

fn header(name: &str, size: u64, mtime: u64) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime.min(MAX_SIZE));
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..274].copy_from_slice(b"ringtrace");
    h[297..306].copy_from_slice(b"ringtrace");
    octal(&mut h[329..337], 0);
    octal(&mut h[337..345], 0);
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// Reads a NUL- or space-terminated field as text.
fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn number(field: &[u8]) -> Result<u64, ArchiveError> {
    if field[0] & 0x80 != 0 {
        // GNU base-256: big-endian, the first byte's top bit is the marker.
        let mut v: u64 = (field[0] & 0x7f) as u64;
        for &b in &field[1..] {
            v = v
                .checked_shl(8)
                .ok_or_else(|| ArchiveError::Corrupt("TAR size too large".into()))?
                | b as u64;
        }
        return Ok(v);
    }
    let s = text(field);
    let s = s.trim_matches(|c: char| c == ' ' || c == '\0');
    if s.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(s, 8).map_err(|_| ArchiveError::Corrupt(format!("bad TAR number {s:?}")))
}

/// The regular-file members of a TAR archive, in order.
pub(crate) fn read(data: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut long_name: Option<String> = None;
    while pos + BLOCK <= data.len() {
        let h = &data[pos..pos + BLOCK];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let stored = number(&h[148..156])?;
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    b as u64
                }
            })
            .sum();
        if stored != sum {
            return Err(ArchiveError::Corrupt(format!(
                "TAR header checksum mismatch at byte {pos}"
            )));
        }
        let size = number(&h[124..136])? as usize;
        let start = pos + BLOCK;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| {
                ArchiveError::Corrupt(format!(
                    "TAR member at byte {pos} runs past the end of the archive"
                ))
            })?;
        let body = &data[start..end];
        let mut name = text(&h[..100]);
        if &h[257..262] == b"ustar" && h[263] == b'0' {
            let prefix = text(&h[345..500]);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        match h[156] {
            b'0' | 0 | b'7' => {
                let name = long_name.take().unwrap_or(name);
                out.push((name, body.to_vec()));
            }
            b'L' => long_name = Some(text(body)),
            _ => long_name = None, // PAX headers, directories, links: skipped
        }
        pos = start + size.div_ceil(BLOCK) * BLOCK;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let mut w = TarWriter::new(Vec::new(), 1_700_000_000);
        w.append("a.pftrace", b"\x0a\x00").unwrap();
        w.append("dir/b.json", &[b'x'; 513]).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() % RECORD as usize, 0);
        assert_eq!(&bytes[257..263], b"ustar\0");
        let members = read(&bytes).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[0], ("a.pftrace".to_string(), b"\x0a\x00".to_vec()));
        assert_eq!(members[1].0, "dir/b.json");
        assert_eq!(members[1].1.len(), 513);
    }

    #[test]
    fn damaged_header_is_reported() {
        let mut w = TarWriter::new(Vec::new(), 0);
        w.append("a", b"1").unwrap();
        let mut bytes = w.finish().unwrap();
        bytes[0] = b'b';
        assert!(matches!(read(&bytes), Err(ArchiveError::Corrupt(_))));
    }
}
