//! The seeded generator of fuzz inputs: a PRNG (splitmix64) and mutations of
//! real traces and archives, generic (truncation, bit flips, inserted,
//! deleted, repeated and spliced bytes, invalid UTF-8) and aware of each
//! format's structure, so that a mutation gets past framing and checksums
//! into the code behind them: Perfetto packets re-framed after a change,
//! lengths made huge or negative, deeply nested messages and JSON, JSON
//! numbers out of every range, TAR and ZIP archives rebuilt with duplicated,
//! missing or renamed members and lying headers, zip and gzip bombs, and
//! manifests with values out of range.
//!
//! One file: every mutation draws from the one seeded `Rng`, the formats'
//! mutations reuse the generic ones and each other's framing (a TAR or ZIP
//! member is mutated as what it holds), and `mutate` picks among them.

use ringtrace_archive::varint;
use std::io::Write;

/// splitmix64: small, fast, and every seed gives a different stream.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// What a seed input is, for the structure-aware mutations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Perfetto,
    Json,
    Tar,
    Zip,
    Gzip,
    Manifest,
    Sidecar,
}

/// Byte strings that are not UTF-8: a lone continuation byte, a truncated
/// sequence, an encoded surrogate, a code point past U+10FFFF, overlong NUL.
const BAD_UTF8: &[&[u8]] = &[
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xc0\x80",
];

/// JSON numbers at and past the edges of i64, u64 and f64.
const JSON_NUMBERS: &[&str] = &[
    "1e999",
    "-1e999",
    "18446744073709551616",
    "-9223372036854775809",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "-1",
    "1.5",
    "0",
    "-0",
    "1e-400",
    "123456789012345678901234567890",
    "null",
    "\"1\"",
    "true",
    "[]",
    "{}",
];

// ------------------------------------------------------------- generic

fn truncate(rng: &mut Rng, d: &mut Vec<u8>) {
    let at = rng.below(d.len() + 1);
    d.truncate(at);
}

fn flip_bits(rng: &mut Rng, d: &mut [u8]) {
    if d.is_empty() {
        return;
    }
    for _ in 0..1 + rng.below(8) {
        let i = rng.below(d.len());
        d[i] ^= 1 << rng.below(8);
    }
}

fn set_bytes(rng: &mut Rng, d: &mut [u8]) {
    const INTERESTING: &[u8] = &[0, 0xff, 0x7f, 0x80, 0x0a, b'{', b'[', b'"', b'\\', b'0'];
    if d.is_empty() {
        return;
    }
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(d.len());
        d[i] = *rng.pick(INTERESTING);
    }
}

fn insert_bytes(rng: &mut Rng, d: &mut Vec<u8>) {
    let at = rng.below(d.len() + 1);
    let bytes: Vec<u8> = match rng.below(3) {
        0 => rng.pick(BAD_UTF8).to_vec(),
        1 => (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect(),
        _ => vec![rng.next() as u8; 1 + rng.below(64)],
    };
    d.splice(at..at, bytes);
}

fn delete_range(rng: &mut Rng, d: &mut Vec<u8>) {
    let a = rng.below(d.len() + 1);
    let b = (a + 1 + rng.below(64)).min(d.len());
    d.drain(a..b);
}

fn repeat_range(rng: &mut Rng, d: &mut Vec<u8>) {
    if d.is_empty() {
        return;
    }
    let a = rng.below(d.len());
    let b = (a + 1 + rng.below(256)).min(d.len());
    let chunk = d[a..b].to_vec();
    let most = if rng.one_in(8) { 2000 } else { 4 };
    let times = 1 + rng.below(most);
    let at = rng.below(d.len() + 1);
    let mut rep = Vec::with_capacity(chunk.len() * times);
    for _ in 0..times {
        rep.extend_from_slice(&chunk);
    }
    d.splice(at..at, rep);
}

fn splice_other(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    let o = rng.pick(others);
    if o.is_empty() {
        return;
    }
    let a = rng.below(o.len());
    let b = (a + 1 + rng.below(512)).min(o.len());
    let at = rng.below(d.len() + 1);
    d.splice(at..at, o[a..b].iter().copied());
}

/// One to four generic mutations.
pub fn generic(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(8) {
            0 => truncate(rng, d),
            1 | 2 => flip_bits(rng, d),
            3 => set_bytes(rng, d),
            4 => insert_bytes(rng, d),
            5 => delete_range(rng, d),
            6 => repeat_range(rng, d),
            _ => splice_other(rng, d, others),
        }
    }
}

// ------------------------------------------------------------- protobuf

pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
pub fn field(num: u64, body: &[u8], out: &mut Vec<u8>) {
    varint(num << 3 | 2, out);
    varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// The packets of a Perfetto trace (field 1 of `Trace`); stops at the first
/// frame it cannot read.
pub fn packets(d: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < d.len() {
        let Some((key, rest)) = varint::read(&d[pos..]) else {
            break;
        };
        let Some((len, rest)) = varint::read(rest) else {
            break;
        };
        let start = d.len() - rest.len();
        let Some(end) = usize::try_from(len).ok().and_then(|l| start.checked_add(l)) else {
            break;
        };
        if key != 0x0a || end > d.len() {
            break;
        }
        out.push(d[start..end].to_vec());
        pos = end;
    }
    out
}

pub fn frame(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        field(1, p, &mut out);
    }
    out
}

/// Lengths no reader should believe: past the end, 2^31, 2^32, u64::MAX
/// (also -1 as a protobuf int64).
const HUGE_LENGTHS: &[u64] = &[
    1 << 31,
    1 << 32,
    (1 << 32) + 5,
    u64::MAX,
    i64::MAX as u64,
    1 << 62,
];

/// A TracePacket whose track event carries a debug annotation nested
/// `depth` dicts deep (or arrays, field 12).
pub fn nested_annotation_packet(depth: usize, array: bool) -> Vec<u8> {
    let tag = if array { 12 } else { 11 };
    let mut ann = Vec::new();
    // Innermost: a named int.
    field(10, b"leaf", &mut ann);
    ann.extend_from_slice(&[0x20, 0x01]); // int_value = 1 (field 4, varint)
    for _ in 0..depth {
        let mut outer = Vec::new();
        field(10, b"n", &mut outer);
        field(tag, &ann, &mut outer);
        ann = outer;
    }
    let mut te = Vec::new();
    te.extend_from_slice(&[0x48, 0x03]); // type = INSTANT (field 9)
    field(23, b"deep", &mut te); // name
    field(4, &ann, &mut te); // debug_annotations
    let mut packet = Vec::new();
    packet.extend_from_slice(&[0x40, 0xe8, 0x07]); // timestamp = 1000
    packet.extend_from_slice(&[0x50, 0x01]); // trusted_packet_sequence_id = 1
    field(11, &te, &mut packet);
    packet
}

/// `compressed_packets` (field 50) holding `inner` zlib-compressed.
pub fn compressed_packet(inner: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(inner).unwrap();
    let mut p = Vec::new();
    field(50, &z.finish().unwrap(), &mut p);
    p
}

/// A zlib bomb in packets: compressed packets nested `levels` deep, the
/// innermost holding `zeros` bytes of empty packets (`0a 00`).
pub fn compressed_bomb(levels: usize, zeros: usize) -> Vec<u8> {
    let mut trace = [0x0a, 0x00].repeat(zeros / 2);
    for _ in 0..levels {
        trace = frame(&[compressed_packet(&trace)]);
    }
    trace
}

fn mutate_perfetto(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    let mut ps = packets(d);
    if ps.is_empty() {
        generic(rng, d, others);
        return;
    }
    match rng.below(9) {
        // A change inside one packet, framed again with its right length:
        // the mutation reaches the packet decoder.
        0..=2 => {
            let i = rng.below(ps.len());
            generic(rng, &mut ps[i], others);
            *d = frame(&ps);
        }
        // A frame length no reader should believe.
        3 => {
            let i = rng.below(ps.len());
            let mut out = frame(&ps[..i]);
            out.push(0x0a);
            varint(*rng.pick(HUGE_LENGTHS), &mut out);
            out.extend_from_slice(&frame(&ps[i..]));
            *d = out;
        }
        // Packets dropped or repeated (a sequence's first packet, its
        // interning, its clock snapshot...).
        4 => {
            let i = rng.below(ps.len());
            if rng.one_in(2) {
                ps.remove(i);
            } else {
                let p = ps[i].clone();
                for _ in 0..1 + rng.below(100) {
                    ps.insert(i, p.clone());
                }
            }
            *d = frame(&ps);
        }
        // A packet from elsewhere in the trace, in another place.
        5 => {
            let p = ps[rng.below(ps.len())].clone();
            let at = rng.below(ps.len() + 1);
            ps.insert(at, p);
            *d = frame(&ps);
        }
        // Deep nesting.
        6 => {
            let depth = *rng.pick(&[50, 99, 100, 101, 1000, 100_000]);
            ps.insert(
                rng.below(ps.len() + 1),
                nested_annotation_packet(depth, rng.one_in(2)),
            );
            *d = frame(&ps);
        }
        // Compressed packets: a slice of the trace compressed, or a bomb.
        7 => {
            let a = rng.below(ps.len());
            let b = (a + 1 + rng.below(8)).min(ps.len());
            let inner = frame(&ps[a..b]);
            let mut inner_mut = inner.clone();
            if rng.one_in(2) {
                generic(rng, &mut inner_mut, others);
            }
            let c = compressed_packet(&inner_mut);
            ps.splice(a..b, [c]);
            *d = frame(&ps);
        }
        // A varint inside a packet made 10 bytes long (a negative int64).
        _ => {
            let i = rng.below(ps.len());
            let p = &mut ps[i];
            if !p.is_empty() {
                let at = rng.below(p.len());
                let mut neg = Vec::new();
                varint(*rng.pick(&[u64::MAX, 1 << 63, (-2i64) as u64]), &mut neg);
                let end = (at + 1).min(p.len());
                p.splice(at..end, neg);
            }
            *d = frame(&ps);
        }
    }
}

// ------------------------------------------------------------------ JSON

fn mutate_json(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    match rng.below(7) {
        // A number replaced by one out of range.
        0 | 1 => {
            let digits: Vec<usize> = (0..d.len())
                .filter(|&i| d[i].is_ascii_digit() && (i == 0 || !d[i - 1].is_ascii_digit()))
                .collect();
            if digits.is_empty() {
                return generic(rng, d, others);
            }
            let a = *rng.pick(&digits);
            let mut b = a;
            while b < d.len() && (d[b].is_ascii_digit() || b".eE+-".contains(&d[b])) {
                b += 1;
            }
            d.splice(a..b, rng.pick(JSON_NUMBERS).bytes());
        }
        // Deep nesting after a colon, or a whole document of it.
        2 => {
            let depth = *rng.pick(&[127, 128, 129, 1000, 100_000]);
            let open = if rng.one_in(2) { "[" } else { "{\"a\":" };
            let deep = open.repeat(depth);
            match (0..d.len()).filter(|&i| d[i] == b':').collect::<Vec<_>>() {
                colons if !colons.is_empty() && rng.one_in(2) => {
                    let at = *rng.pick(&colons) + 1;
                    d.splice(at..at, deep.bytes());
                }
                _ => *d = format!("[{deep}").into_bytes(),
            }
        }
        // Invalid UTF-8 or escapes inside a string.
        3 => {
            let quotes: Vec<usize> = (0..d.len()).filter(|&i| d[i] == b'"').collect();
            if quotes.is_empty() {
                return generic(rng, d, others);
            }
            let at = *rng.pick(&quotes) + 1;
            let bad: &[u8] = match rng.below(4) {
                0 => rng.pick::<&[u8]>(BAD_UTF8),
                1 => b"\\ud800",
                2 => b"\\u00zz",
                _ => b"\\",
            };
            d.splice(at..at, bad.iter().copied());
        }
        // An event repeated many times, or the array cut after a comma.
        4 => {
            let commas: Vec<usize> = (0..d.len()).filter(|&i| d[i] == b',').collect();
            if commas.is_empty() {
                return generic(rng, d, others);
            }
            let at = *rng.pick(&commas);
            if rng.one_in(2) {
                d.truncate(at + 1);
            } else {
                repeat_range(rng, d);
            }
        }
        _ => generic(rng, d, others),
    }
}

// ------------------------------------------------------------------ TAR

/// Member list of a TAR as this generator reads it: (header, body).
fn tar_entries(d: &[u8]) -> Vec<([u8; 512], Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 512 <= d.len() {
        let h: [u8; 512] = d[pos..pos + 512].try_into().unwrap();
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let size_text = String::from_utf8_lossy(&h[124..135])
            .trim_matches(['\0', ' '])
            .to_string();
        let size = usize::from_str_radix(&size_text, 8).unwrap_or(0);
        let start = pos + 512;
        let end = (start + size).min(d.len());
        out.push((h, d[start..end].to_vec()));
        pos = start + size.div_ceil(512) * 512;
    }
    out
}

fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    let s = &s.as_bytes()[s.len().saturating_sub(digits)..];
    field[..digits].copy_from_slice(s);
    field[digits] = 0;
}

fn fix_checksum(h: &mut [u8; 512]) {
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
}

fn tar_emit(entries: &[([u8; 512], Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (h, body) in entries {
        out.extend_from_slice(h);
        out.extend_from_slice(body);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn mutate_member_body(rng: &mut Rng, body: &mut Vec<u8>, others: &[&[u8]]) {
    let shape = match body.first() {
        Some(0x0a) => Shape::Perfetto,
        Some(b'{') if body.starts_with(b"{\"perfetto_manifest\"") => Shape::Manifest,
        Some(b'{' | b'[') => Shape::Json,
        _ => return generic(rng, body, others),
    };
    mutate(rng, body, shape, others);
}

fn mutate_tar(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    let mut es = tar_entries(d);
    if es.is_empty() {
        return generic(rng, d, others);
    }
    let i = rng.below(es.len());
    match rng.below(8) {
        0 => {
            let e = es[i].clone();
            es.insert(rng.below(es.len() + 1), e); // a duplicated member
        }
        1 => {
            es.remove(i); // a missing member (maybe the manifest)
        }
        2 => {
            // A renamed member: invalid UTF-8, dot-components, long, empty.
            let name: Vec<u8> = match rng.below(5) {
                0 => [&b"bad"[..], *rng.pick(BAD_UTF8)].concat(),
                1 => b".hidden/x.json".to_vec(),
                2 => vec![b'n'; 100],
                3 => b"../../etc/passwd".to_vec(),
                _ => Vec::new(),
            };
            let h = &mut es[i].0;
            h[..100].fill(0);
            h[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
            fix_checksum(h);
        }
        3 => {
            // A size field that lies: huge octal, base-256 huge or negative.
            let h = &mut es[i].0;
            match rng.below(3) {
                0 => h[124..136].copy_from_slice(b"77777777777\0"),
                1 => {
                    h[124] = 0x80;
                    h[125..136].fill(0xff);
                }
                _ => h[124..136].fill(0xff),
            }
            fix_checksum(h);
        }
        4 => {
            // Another type: GNU long name, PAX, directory, link, garbage.
            let h = &mut es[i].0;
            h[156] = *rng.pick(b"L5x2g1K\xff");
            fix_checksum(h);
        }
        5 => {
            // A change in the header, checksum fixed so it is believed.
            let h = &mut es[i].0;
            let at = rng.below(512);
            h[at] = rng.next() as u8;
            if !(148..156).contains(&at) {
                fix_checksum(h);
            }
        }
        _ => {
            // A member's content mutated as what it is, size kept right.
            let (h, body) = &mut es[i];
            mutate_member_body(rng, body, others);
            octal(&mut h[124..136], body.len() as u64);
            fix_checksum(h);
        }
    }
    *d = tar_emit(&es);
}

// ------------------------------------------------------------------ ZIP

pub struct ZipEntry {
    pub name: Vec<u8>,
    pub data: Vec<u8>,
    pub deflate: bool,
}

/// A ZIP (this generator's own writer): local headers, central directory,
/// end record. `lie` changes one field of every central entry.
pub fn zip(entries: &[ZipEntry], lie: Option<(usize, u32)>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for e in entries {
        let body = if e.deflate {
            let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(&e.data).unwrap();
            z.finish().unwrap()
        } else {
            e.data.clone()
        };
        let crc = crc32fast::hash(&e.data);
        let method: u16 = if e.deflate { 8 } else { 0 };
        let offset = out.len() as u32;
        let mut common = Vec::new();
        common.extend_from_slice(&20u16.to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes());
        common.extend_from_slice(&method.to_le_bytes());
        common.extend_from_slice(&[0; 4]);
        common.extend_from_slice(&crc.to_le_bytes());
        common.extend_from_slice(&(body.len() as u32).to_le_bytes());
        common.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
        common.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&common);
        out.extend_from_slice(&e.name);
        out.extend_from_slice(&body);
        let mut c = Vec::new();
        c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        c.extend_from_slice(&20u16.to_le_bytes());
        c.extend_from_slice(&common);
        c.extend_from_slice(&[0; 8]);
        c.extend_from_slice(&0u32.to_le_bytes());
        c.extend_from_slice(&offset.to_le_bytes());
        c.extend_from_slice(&e.name);
        if let Some((at, v)) = lie {
            if at + 4 <= 46 {
                c[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        central.extend_from_slice(&c);
    }
    let cd_start = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_start.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// The members of a ZIP written by [`zip`] or by ringtrace (stored or
/// deflate, sizes in the local headers).
fn zip_entries(d: &[u8]) -> Vec<ZipEntry> {
    let mut out = Vec::new();
    let mut pos = 0;
    let u16_at = |p: usize| {
        d.get(p..p + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |p: usize| {
        d.get(p..p + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    while d.get(pos..pos + 4) == Some(&b"PK\x03\x04"[..]) {
        let (Some(method), Some(csize), Some(nlen), Some(xlen)) = (
            u16_at(pos + 8),
            u32_at(pos + 18),
            u16_at(pos + 26),
            u16_at(pos + 28),
        ) else {
            break;
        };
        let name_start = pos + 30;
        let body_start = name_start + nlen + xlen;
        let Some(body) = d.get(body_start..body_start + csize) else {
            break;
        };
        let data = if method == 8 {
            let mut v = Vec::new();
            if std::io::Read::read_to_end(&mut flate2::read::DeflateDecoder::new(body), &mut v)
                .is_err()
            {
                break;
            }
            v
        } else {
            body.to_vec()
        };
        out.push(ZipEntry {
            name: d[name_start..name_start + nlen].to_vec(),
            data,
            deflate: method == 8,
        });
        pos = body_start + csize;
    }
    out
}

/// A ZIP with one deflated member of `size` zero bytes (about 1000 times
/// smaller than that).
pub fn zip_bomb(name: &[u8], size: usize) -> Vec<u8> {
    zip(
        &[ZipEntry {
            name: name.to_vec(),
            data: vec![0; size],
            deflate: true,
        }],
        None,
    )
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

fn mutate_zip(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    let mut es = zip_entries(d);
    if es.is_empty() {
        return generic(rng, d, others);
    }
    let i = rng.below(es.len());
    let mut lie = None;
    match rng.below(7) {
        0 => {
            let e = ZipEntry {
                name: es[i].name.clone(),
                data: es[i].data.clone(),
                deflate: !es[i].deflate,
            };
            es.insert(rng.below(es.len() + 1), e); // a duplicated member
        }
        1 => {
            es.remove(i); // a missing member
        }
        2 => {
            es[i].name = match rng.below(3) {
                0 => [&b"x"[..], *rng.pick(BAD_UTF8)].concat(),
                1 => b"dir/".to_vec(),
                _ => b".hidden".to_vec(),
            };
        }
        // Central directory fields that lie: flags (encryption), method,
        // CRC, compressed size, size, local header offset.
        3 | 4 => {
            let at = *rng.pick(&[8usize, 10, 16, 20, 24, 42]);
            let v = *rng.pick(&[0xffff_ffffu32, 0x7fff_ffff, 0x0001_0001, 12, 99, 1]);
            lie = Some((at, v));
        }
        5 => {
            // A bomb beside the real members.
            es.push(ZipEntry {
                name: b"bomb.json".to_vec(),
                data: vec![b' '; (4 + rng.below(12)) << 20],
                deflate: true,
            });
        }
        _ => mutate_member_body(rng, &mut es[i].data, others),
    }
    *d = zip(&es, lie);
    if rng.one_in(4) {
        // The end record's counts and offsets lie too.
        let n = d.len();
        let at = n - 22 + *rng.pick(&[8usize, 10, 12, 16]);
        let v = *rng.pick(&[0xffu8, 0x7f, 0]);
        d[at] = v;
        d[at + 1] = v;
    }
}

// ----------------------------------------------------------- manifest

fn mutate_manifest(rng: &mut Rng, d: &mut Vec<u8>, others: &[&[u8]]) {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(d) else {
        return mutate_json(rng, d, others);
    };
    let values = [
        serde_json::json!(i64::MAX),
        serde_json::json!(i64::MIN),
        serde_json::json!(u64::MAX),
        serde_json::json!(-1),
        serde_json::json!(4_294_967_296u64),
        serde_json::json!(1.5),
        serde_json::json!("BOOTTIME"),
        serde_json::json!("NOT_A_CLOCK"),
        serde_json::json!(""),
        serde_json::json!(null),
        serde_json::json!([]),
        serde_json::json!({}),
        serde_json::json!("missing.pftrace"),
    ];
    // Every place in the document, then one of them replaced or removed.
    fn places(v: &serde_json::Value, path: String, out: &mut Vec<String>) {
        out.push(path.clone());
        match v {
            serde_json::Value::Object(o) => {
                for (k, c) in o {
                    places(
                        c,
                        format!("{path}/{}", k.replace('~', "~0").replace('/', "~1")),
                        out,
                    )
                }
            }
            serde_json::Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    places(c, format!("{path}/{i}"), out)
                }
            }
            _ => {}
        }
    }
    let mut all = Vec::new();
    places(&v, String::new(), &mut all);
    for _ in 0..1 + rng.below(3) {
        let p = rng.pick(&all).clone();
        if p.is_empty() {
            continue;
        }
        if let Some(slot) = v.pointer_mut(&p) {
            *slot = rng.pick(&values).clone();
        }
    }
    *d = serde_json::to_vec(&v).unwrap();
    if rng.one_in(4) {
        generic(rng, d, others);
    }
}

/// One mutation of `d`, a seed of shape `shape`; `others` are the other
/// seeds (for splicing).
pub fn mutate(rng: &mut Rng, d: &mut Vec<u8>, shape: Shape, others: &[&[u8]]) {
    if rng.one_in(5) {
        return generic(rng, d, others);
    }
    match shape {
        Shape::Perfetto => mutate_perfetto(rng, d, others),
        Shape::Json | Shape::Sidecar => mutate_json(rng, d, others),
        Shape::Tar => mutate_tar(rng, d, others),
        Shape::Zip => mutate_zip(rng, d, others),
        Shape::Gzip => {
            let mut inner = Vec::new();
            let ok = std::io::Read::read_to_end(
                &mut flate2::read::MultiGzDecoder::new(d.as_slice()),
                &mut inner,
            )
            .is_ok();
            if !ok || rng.one_in(3) {
                return generic(rng, d, others);
            }
            mutate_tar(rng, &mut inner, others);
            let mut out = gzip(&inner);
            if rng.one_in(4) {
                // A second gzip member, maybe a bomb.
                let second = if rng.one_in(2) {
                    vec![0; 8 << 20]
                } else {
                    inner.clone()
                };
                out.extend_from_slice(&gzip(&second));
            }
            *d = out;
        }
        Shape::Manifest => mutate_manifest(rng, d, others),
    }
}
