//! The header word every record starts with, and the loss marker the ring
//! writes itself. The ring reads only a header's length; what the kind and
//! the payload mean is `layout`'s (the record kinds) and the encoders'.
//!
//! ```text
//! bits  0..4   kind (see `layout`)
//! bits  4..24  length of the record in words, header included (>= 1)
//! bits 24..64  kind-specific payload (callsite id, nesting depth, ...)
//! ```

/// Words of the loss marker written in drop mode: header, timestamp, count.
pub(crate) const LOST_MARKER_WORDS: usize = 3;
/// Kind value of the loss marker (`layout::KIND_LOST`).
pub(crate) const KIND_LOST: u64 = 1;

/// Length in words of the record whose header is `header`.
#[inline]
pub(crate) fn header_len(header: u64) -> u64 {
    (header >> 4) & 0xf_ffff
}

/// Kind of the record whose header is `header`.
#[inline]
pub(crate) fn header_kind(header: u64) -> u64 {
    header & 0xf
}

/// Kind-specific payload of the record whose header is `header`.
#[inline]
pub(crate) fn header_payload(header: u64) -> u64 {
    header >> 24
}

/// Builds a header word.
#[inline]
pub(crate) fn make_header(kind: u64, len_words: usize, payload: u64) -> u64 {
    debug_assert!(kind < 16 && len_words > 0 && len_words < (1 << 20) && payload < (1 << 40));
    kind | ((len_words as u64) << 4) | (payload << 24)
}
