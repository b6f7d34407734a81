//! A minimal protobuf wire writer: varints, fixed64, length-delimited fields
//! and nested messages, appended to a `Vec<u8>`. Fields are written exactly as
//! asked: nothing is elided because it is zero, and repeated scalars are
//! written one tag per element (never packed), as Perfetto's readers expect.

pub(crate) const WT_VARINT: u32 = 0;
pub(crate) const WT_FIXED64: u32 = 1;
pub(crate) const WT_LEN: u32 = 2;

#[inline]
pub(crate) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[inline]
pub(crate) fn tag(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(buf, ((field << 3) | wire_type) as u64);
}

/// uint32/uint64/enum/bool field.
#[inline]
pub(crate) fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, WT_VARINT);
    varint(buf, v);
}

/// int32/int64 field (two's complement, 10 bytes when negative).
#[inline]
pub(crate) fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    uint(buf, field, v as u64);
}

#[inline]
pub(crate) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, WT_FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    fixed64(buf, field, v.to_bits());
}

#[inline]
pub(crate) fn bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    tag(buf, field, WT_LEN);
    varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

#[inline]
pub(crate) fn string(buf: &mut Vec<u8>, field: u32, v: &str) {
    bytes(buf, field, v.as_bytes());
}

/// Writes a nested message built by `f`. One byte is reserved for the length;
/// a body of 128 bytes or more is shifted to make room for a longer varint.
#[inline]
pub(crate) fn nested<R>(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    tag(buf, field, WT_LEN);
    buf.push(0);
    let start = buf.len();
    let r = f(buf);
    let len = buf.len() - start;
    if len < 0x80 {
        buf[start - 1] = len as u8;
    } else {
        let extra = varint_len(len as u64) - 1;
        let mut prefix = Vec::with_capacity(extra + 1);
        varint(&mut prefix, len as u64);
        buf.splice(start - 1..start, prefix);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_packet() {
        // {timestamp:1000, trusted_packet_sequence_id:1, track_event{type:SLICE_BEGIN, track_uuid:42, name:"a"}}
        let mut buf = Vec::new();
        nested(&mut buf, 1, |p| {
            uint(p, 8, 1000);
            uint(p, 10, 1);
            nested(p, 11, |te| {
                uint(te, 9, 1);
                uint(te, 11, 42);
                string(te, 23, "a");
            });
        });
        assert_eq!(
            buf,
            [
                0x0a, 0x0f, 0x40, 0xe8, 0x07, 0x50, 0x01, 0x5a, 0x08, 0x48, 0x01, 0x58, 0x2a, 0xba,
                0x01, 0x01, 0x61
            ]
        );
    }

    #[test]
    fn long_nested_bodies_get_long_lengths() {
        let mut buf = Vec::new();
        nested(&mut buf, 1, |p| bytes(p, 2, &[7u8; 300]));
        assert_eq!(&buf[..3], &[0x0a, 0xaf, 0x02]); // 303 = 0xaf 0x02
        assert_eq!(buf.len(), 3 + 303);
    }
}
