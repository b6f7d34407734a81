//! Reading protobuf varints from untrusted bytes: the one reader the
//! archive's sniffing and the `ringtrace` command's trace decoding share.

/// The varint at the start of `data` and the bytes that follow it; `None`
/// when `data` ends inside the varint or it runs past the 10 bytes a 64-bit
/// value takes at most. Never panics: bits past the 64th are dropped, as
/// protobuf readers do.
///
/// ```
/// use ringtrace_archive::varint;
///
/// assert_eq!(varint::read(&[0x96, 0x01, 0xff]), Some((150, &[0xff][..])));
/// assert_eq!(varint::read(&[0x80]), None); // ends inside the varint
/// ```
pub fn read(data: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, &b) in data.iter().enumerate().take(10) {
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, &data[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::read;

    #[test]
    fn values_and_what_follows() {
        assert_eq!(read(&[0]), Some((0, &[][..])));
        assert_eq!(read(&[0x7f, 1]), Some((127, &[1][..])));
        assert_eq!(read(&[0xac, 0x02]), Some((300, &[][..])));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read(&max), Some((u64::MAX, &[][..])));
    }

    #[test]
    fn cut_short_or_too_long_is_none() {
        assert_eq!(read(&[]), None);
        assert_eq!(read(&[0x80, 0x80]), None);
        assert_eq!(read(&[0x80; 10]), None);
        assert_eq!(read(&[0xff; 64]), None);
    }
}
