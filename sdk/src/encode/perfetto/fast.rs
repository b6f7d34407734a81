//! The fast path of the commonest records: a scope's BEGIN without args and
//! its END, on a sequence whose incremental state is valid.
//!
//! Everything in such a packet but its timestamp is constant while the
//! sequence's interning lasts: the sequence id and flags, and the track event
//! (category, type, name and source location iids). So the first plain begin
//! of a call site on a sequence takes the general path (which interns its
//! strings) and then leaves a template of those bytes; later ones are the
//! framing, the varint delta and a copy of the template. Templates are
//! forgotten with the interning (`Seq::clear_interning`), so a reset always
//! takes the general path again. Anything unusual (args, flows waiting, a
//! lost record to close, a reset due, no template yet) takes the general
//! path, which writes the same bytes (tests: `fast_path_writes_what_the_general_path_writes`).
//!
//! A packet is written into `out`'s spare capacity (at least
//! [`PACKET_MAX`] bytes) and then counted in: one capacity check and a few
//! fixed-size stores per packet, no capacity check per field. A begin's
//! arguments are written the same way by `direct`.

use super::annotations::annotations;
use super::fields::{
    P_SEQUENCE_FLAGS, P_SEQUENCE_ID, P_TIMESTAMP, P_TRACK_EVENT, SEQ_NEEDS_INCREMENTAL_STATE,
    TE_CATEGORY_IIDS, TE_NAME_IID, TE_SOURCE_LOCATION_IID, TE_TYPE, TYPE_INSTANT, TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
};
use super::{PerfettoEncoder, Seq};
use crate::encode::protowire::{len_field_len, len_head, patch_len, uint, uint_len, Spare};
use crate::encode::Context;
use crate::record::callsite::Callsite;
use crate::record::clock::Calibration;
use crate::record::header::{header_kind, header_len, header_payload};
use crate::record::layout::parse;
use crate::record::layout::{KIND_BEGIN, KIND_END, KIND_INSTANT};
use std::mem::MaybeUninit;

mod direct;
use direct::{direct_annotations, ANN_MAX_HEAD, SLACK};

/// Largest template: what a packet holds after its timestamp.
const TMPL_MAX: usize = 32;
/// Largest fast packet: tag, one-byte length, timestamp tag, a 10-byte
/// varint, the template.
const PACKET_MAX: usize = 3 + 10 + TMPL_MAX;

/// The bytes of a packet after its timestamp: sequence id, flags, track
/// event. `len == 0`: none (take the general path).
#[derive(Clone, Copy)]
pub(super) struct Tmpl {
    len: u8,
    /// Where the track event's head starts (the sequence's fields before).
    te_at: u8,
    /// The call site has no arguments: the template is the whole packet.
    plain: bool,
    /// Where the call site's argument-name iids start in the sequence's
    /// `site_ann_iids`, plus one (0: none), kept here so a begin with args
    /// need not look it up (it never moves once set).
    ann: u32,
    /// The template, then zeros (a fixed-size copy writes it all).
    bytes: [u8; TMPL_MAX],
}

impl Default for Tmpl {
    fn default() -> Self {
        Tmpl {
            len: 0,
            te_at: 0,
            plain: true,
            ann: 0,
            bytes: [0; TMPL_MAX],
        }
    }
}

impl Tmpl {
    /// The template of packets on sequence `seq_id` whose track event is
    /// `te` and which carry no interned data; none if it is too long.
    fn of(seq_id: u64, flag: bool, te: &[u8]) -> Tmpl {
        let mut v = Vec::with_capacity(TMPL_MAX + 16);
        uint(&mut v, P_SEQUENCE_ID, seq_id);
        if flag {
            uint(&mut v, P_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
        }
        let te_at = v.len();
        len_head(&mut v, P_TRACK_EVENT, te.len());
        v.extend_from_slice(te);
        let mut t = Tmpl::default();
        if v.len() <= TMPL_MAX && te.len() < 0x80 {
            t.len = v.len() as u8;
            t.te_at = te_at as u8;
            t.bytes[..v.len()].copy_from_slice(&v);
        }
        t
    }
}

/// Bytes `out` is grown by when it has no room for a packet.
const GROW: usize = 64 * 1024;

impl Tmpl {
    /// The sequence's fields (id, flags).
    fn seq_part(&self) -> &[u8] {
        &self.bytes[..self.te_at as usize]
    }

    /// The track event's fields before any argument (category, type, name,
    /// source location).
    fn te_part(&self) -> &[u8] {
        &self.bytes[self.te_at as usize + 2..self.len as usize]
    }
}

/// Appends a packet to `out`: `delta` on the sequence clock, then `t`'s
/// bytes. One capacity check, a few stores and a fixed-size copy.
#[inline(always)]
#[allow(unsafe_code)]
fn put(out: &mut Vec<u8>, delta: u64, t: &Tmpl) {
    if out.capacity() - out.len() < PACKET_MAX {
        out.reserve(GROW);
    }
    let len = out.len();
    // SAFETY: the spare capacity holds at least PACKET_MAX bytes (checked
    // or reserved above), and `write_packet` writes only those and
    // initialises the `n` it returns.
    unsafe {
        let n = write_packet(out.as_mut_ptr().add(len), delta, t);
        out.set_len(len + n);
    }
}

/// Writes a packet (framing, `delta` on the sequence clock, `t`'s bytes)
/// at `dst` and returns its length, at most [`PACKET_MAX`]. Stores through
/// the pointer: no bounds check per byte.
///
/// # Safety
/// `dst` is valid for writes of [`PACKET_MAX`] bytes.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn write_packet(dst: *mut u8, delta: u64, t: &Tmpl) -> usize {
    // A byte at a time: the deltas of busy threads are short (a byte or
    // two), and building a word costs more than it saves there.
    let mut n = 3;
    let mut v = delta;
    // SAFETY (all stores below): a varint of a u64 takes at most 10 bytes,
    // so every byte written lies in `dst[..3 + 10 + TMPL_MAX]`, which the
    // caller guarantees is writable.
    unsafe {
        while v >= 0x80 {
            *dst.add(n) = v as u8 | 0x80;
            v >>= 7;
            n += 1;
        }
        *dst.add(n) = v as u8;
        n += 1;
        std::ptr::copy_nonoverlapping(t.bytes.as_ptr(), dst.add(n), TMPL_MAX);
        let total = n + t.len as usize;
        *dst = 0x0a; // Trace.packet
        *dst.add(1) = (total - 2) as u8; // at most 43: one byte
        *dst.add(2) = (P_TIMESTAMP << 3) as u8;
        total
    }
}

/// A leaf scope's two packets: the begin's at `begin_ticks` (`t`) and the
/// end's at `end_ticks` (`end_t`), the sequence clock at `last`; the
/// clock after them. One capacity check for both.
#[inline(always)]
#[allow(unsafe_code)]
fn leaf(
    cal: &Calibration,
    begin_ticks: u64,
    end_ticks: u64,
    last: u64,
    t: &Tmpl,
    end_t: &Tmpl,
    out: &mut Vec<u8>,
) -> u64 {
    let begin = cal.to_ns(begin_ticks).max(last);
    let end = cal.to_ns(end_ticks).max(begin);
    if out.capacity() - out.len() < 2 * PACKET_MAX {
        out.reserve(GROW);
    }
    let len = out.len();
    // SAFETY: the spare capacity holds at least 2 * PACKET_MAX bytes
    // (checked or reserved above); each `write_packet` writes at most
    // PACKET_MAX of them, the second after the first's `n0`, and
    // initialises what it returns, so `len + n0 + n1` bytes are.
    unsafe {
        let dst = out.as_mut_ptr().add(len);
        let n0 = write_packet(dst, begin - last, t);
        let n1 = write_packet(dst.add(n0), end - begin, end_t);
        out.set_len(len + n0 + n1);
    }
    end
}

/// [`leaf`] for each pair of records at the start of `words` whose headers
/// are `pair` (the same leaf again: a scope in a loop); the words taken
/// and the clock after them. Out of line: the loop keeps its values in
/// registers.
#[inline(never)]
fn leaf_run(
    cal: &Calibration,
    words: &[u64],
    pair: [u64; 2],
    mut last: u64,
    t: &Tmpl,
    end_t: &Tmpl,
    out: &mut Vec<u8>,
) -> (usize, u64) {
    let mut n = 0;
    while let Some(&[h, begin_ticks, e, end_ticks]) = words.get(n..n + 4) {
        if [h, e] != pair {
            break;
        }
        last = leaf(cal, begin_ticks, end_ticks, last, t, end_t, out);
        n += 4;
    }
    (n, last)
}

impl PerfettoEncoder {
    /// Encodes the records of one batch of `seq`: plain begins and ends
    /// with templates, everything else through [`Self::record`].
    pub(super) fn records(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        words: &[u64],
        out: &mut Vec<u8>,
    ) {
        let mut pos = 0;
        while pos < words.len() {
            let hdr = words[pos];
            let len = header_len(hdr) as usize;
            if len < 2 || pos + len > words.len() {
                break; // cut: as `parse`, nothing after it is read
            }
            if seq.valid {
                let ts = words[pos + 1];
                // Scopes without args whose end comes next (leaves): both
                // packets at once, the scope never on the stack.
                if header_kind(hdr) == KIND_BEGIN && len == 2 {
                    let n = self.fast_leaves(ctx, seq, &words[pos..], out);
                    if n > 0 {
                        pos += n;
                        continue;
                    }
                }
                let done = match header_kind(hdr) {
                    KIND_BEGIN => {
                        self.fast_begin(ctx, seq, hdr, ts, &words[pos + 2..pos + len], out)
                    }
                    KIND_END if len == 2 => self.fast_end(ctx, seq, hdr, ts, out),
                    KIND_INSTANT => {
                        self.fast_instant(ctx, seq, hdr, ts, &words[pos + 2..pos + len], out)
                    }
                    _ => false,
                };
                if done {
                    pos += len;
                    continue;
                }
            }
            if let Some(rec) = parse(&words[pos..pos + len]).next() {
                self.record(ctx, seq, rec, out);
            }
            pos += len;
        }
    }

    /// A BEGIN of a call site with a template, orphaning nothing, with no
    /// flows waiting for it. Args are written as the general path writes
    /// them, after the template's track event fields.
    #[inline(always)]
    fn fast_begin(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        hdr: u64,
        ticks: u64,
        args: &[u64],
        out: &mut Vec<u8>,
    ) -> bool {
        let payload = header_payload(hdr);
        let site = (payload & crate::record::layout::MAX_SITE_ID as u64) as u32;
        let depth = (payload >> 24) as u32;
        let Some(t) = seq.begin_tmpl.get(site as usize) else {
            return false;
        };
        if t.len == 0 || !seq.ext.no_flows_waiting() {
            return false;
        }
        let t = *t;
        let cs = if t.plain && args.is_empty() {
            None
        } else {
            match ctx.sites.get(site) {
                Some(cs) => Some(cs),
                None => return false,
            }
        };
        let ts = ctx.cal.to_ns(ticks).max(seq.last_ns);
        if !seq.stack.try_begin_plain(depth, site, ts) {
            return false;
        }
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        match cs {
            None => put(out, delta, &t),
            Some(cs) => self.begin_with_args(seq, cs, args, delta, &t, out),
        }
        true
    }

    /// `words` starts with a plain BEGIN (no args): if the END of the same
    /// scope comes right after it and its call site has a template, writes
    /// what [`Self::fast_begin`] then [`Self::fast_end`] would, and goes on
    /// while the next two records are the same pair again (a scope in a
    /// loop); the words taken, or 0 (nothing done) where either of them
    /// would have declined. The scope stack ends as it was, so it is not
    /// touched, and a repeat needs no check but its two headers.
    #[inline(always)]
    fn fast_leaves(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        words: &[u64],
        out: &mut Vec<u8>,
    ) -> usize {
        let Some(&[hdr, _, end_hdr, _]) = words.get(..4) else {
            return 0;
        };
        let payload = header_payload(hdr);
        let site = (payload & crate::record::layout::MAX_SITE_ID as u64) as usize;
        let depth = (payload >> 24) as u32;
        if header_kind(end_hdr) != KIND_END
            || header_len(end_hdr) != 2
            || header_payload(end_hdr) as u32 != depth
        {
            return 0;
        }
        let Some(t) = seq.begin_tmpl.get(site) else {
            return 0;
        };
        if t.len == 0 || !t.plain || !seq.ext.no_flows_waiting() || !seq.flows.is_empty() {
            return 0;
        }
        // As `try_begin_plain` would accept it (nothing orphaned).
        if seq.stack.top_depth().is_some_and(|top| top >= depth) {
            return 0;
        }
        if seq.end_tmpl.len == 0 {
            self.make_end_template(seq);
        }
        let (t, end_t) = (&seq.begin_tmpl[site], &seq.end_tmpl);
        let mut last = leaf(ctx.cal, words[1], words[3], seq.last_ns, t, end_t, out);
        let mut n = 4;
        if words.get(4) == Some(&hdr) {
            let (more, at) = leaf_run(ctx.cal, &words[4..], [hdr, end_hdr], last, t, end_t, out);
            n += more;
            last = at;
        }
        seq.last_ns = last;
        self.stats.events += n as u64 / 2;
        n
    }

    /// An INSTANT on the thread's track of a call site with a template.
    #[inline(always)]
    fn fast_instant(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        hdr: u64,
        ticks: u64,
        args: &[u64],
        out: &mut Vec<u8>,
    ) -> bool {
        let site = (header_payload(hdr) & crate::record::layout::MAX_SITE_ID as u64) as u32;
        let Some(t) = seq.instant_tmpl.get(site as usize) else {
            return false;
        };
        if t.len == 0 {
            return false;
        }
        let t = *t;
        let Some(cs) = ctx.sites.get(site) else {
            return false;
        };
        let ts = ctx.cal.to_ns(ticks).max(seq.last_ns);
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        if t.plain {
            put(out, delta, &t);
        } else {
            self.begin_with_args(seq, cs, args, delta, &t, out);
        }
        true
    }

    /// A begin (or instant) whose call site has arguments (or whose record
    /// has words the site does not name): the template's fields, then the
    /// annotations. Scalars and strings are written straight into `out`'s
    /// spare capacity ([`Spare`]) with one-byte lengths patched afterwards
    /// (a body of 128 bytes or more is moved forward to make room: the
    /// bytes sizing first would have written); anything else (a container,
    /// a name not interned) by [`Self::begin_with_args_general`].
    #[allow(unsafe_code)]
    fn begin_with_args(
        &mut self,
        seq: &mut Seq,
        cs: &'static Callsite,
        args: &[u64],
        delta: u64,
        t: &Tmpl,
        out: &mut Vec<u8>,
    ) {
        let names = cs.arg_names.len();
        // What `direct_annotations` can write (see there), the 8 bytes
        // a word store may write past the last byte kept, and [`SLACK`].
        let bound = PACKET_MAX + 8 + SLACK + ANN_MAX_HEAD * names + 8 * args.len().min(names * 64);
        out.reserve(bound);
        let len = out.len();
        let mut w = Spare {
            buf: &mut out.spare_capacity_mut()[..bound],
            n: 0,
        };
        // Trace.packet (its length patched), the timestamp's tag and delta.
        w.word(0x0a | ((P_TIMESTAMP << 3) as u64) << 16, 3);
        w.varint(delta);
        // The template: the sequence's fields, the track event's tag, its
        // length (patched), its fields.
        let te_start = w.n + t.te_at as usize + 2;
        w.fixed(&t.bytes, t.len as usize);
        if !direct_annotations(seq, cs, t.ann, args, &mut w) {
            return self.begin_with_args_general(seq, cs, args, delta, t, out);
        }
        let n = w.n;
        // The usual packet (< 128 bytes): both lengths take their one byte.
        let short = n - 2 < 0x80;
        if short {
            w.buf[te_start - 1] = MaybeUninit::new((n - te_start) as u8);
            w.buf[1] = MaybeUninit::new((n - 2) as u8);
        }
        // SAFETY: `Spare` writes its bytes in order from the start of the
        // spare capacity, each one through a bounds-checked index into the
        // `bound` bytes reserved above, so bytes `len..len + n` are
        // initialised and `len + n <= capacity`.
        unsafe { out.set_len(len + n) };
        if !short {
            patch_len(out, len + te_start);
            patch_len(out, len + 2);
        }
    }

    /// [`Self::begin_with_args`] through the scratch buffers: interns what
    /// is not interned yet, writes containers.
    #[cold]
    fn begin_with_args_general(
        &mut self,
        seq: &mut Seq,
        cs: &'static Callsite,
        args: &[u64],
        delta: u64,
        t: &Tmpl,
        out: &mut Vec<u8>,
    ) {
        self.te.clear();
        self.interned.clear();
        self.te.extend_from_slice(t.te_part());
        if !cs.arg_names.is_empty() {
            annotations(seq, cs, args, &mut self.te, &mut self.interned);
        }
        if !self.interned.is_empty() {
            // Not expected (the template was made when the names were
            // interned); the general framing writes what was interned.
            return self.emit(seq, delta, out);
        }
        let te_len = self.te.len();
        let seq_part = t.seq_part();
        let len =
            uint_len(P_TIMESTAMP, delta) + seq_part.len() + len_field_len(P_TRACK_EVENT, te_len);
        out.reserve(len + 10);
        len_head(out, 1, len);
        uint(out, P_TIMESTAMP, delta);
        out.extend_from_slice(seq_part);
        len_head(out, P_TRACK_EVENT, te_len);
        out.extend_from_slice(&self.te);
    }

    /// An END of the innermost open scope with no flows waiting for it.
    #[inline(always)]
    fn fast_end(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        hdr: u64,
        ticks: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        if !seq.flows.is_empty() {
            return false;
        }
        if seq.end_tmpl.len == 0 {
            self.make_end_template(seq);
        }
        let depth = header_payload(hdr) as u32;
        if seq.stack.try_end_top(depth).is_none() {
            return false;
        }
        let ts = ctx.cal.to_ns(ticks).max(seq.last_ns);
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        put(out, delta, &seq.end_tmpl);
        true
    }

    /// After the general path wrote a begin of `cs` on the thread's track
    /// (its strings, argument names included, now interned): keeps the
    /// template of its later begins.
    pub(super) fn note_begin(&self, seq: &mut Seq, cs: &Callsite) {
        let t = self.template(seq, cs, TYPE_SLICE_BEGIN, |seq| &mut seq.begin_tmpl);
        if let Some(t) = t {
            seq.begin_tmpl[cs.id() as usize] = t;
        }
    }

    /// After the general path wrote an instant of `cs` on the thread's
    /// track: keeps the template of its later instants.
    pub(super) fn note_instant(&self, seq: &mut Seq, cs: &Callsite) {
        let t = self.template(seq, cs, TYPE_INSTANT, |seq| &mut seq.instant_tmpl);
        if let Some(t) = t {
            seq.instant_tmpl[cs.id() as usize] = t;
        }
    }

    /// The template of `cs`'s events of type `ty` (as `fill_event` writes
    /// them) if `slot` (which it makes room in) has none yet and `cs`'s
    /// strings are interned.
    fn template(
        &self,
        seq: &mut Seq,
        cs: &Callsite,
        ty: u64,
        slot: impl FnOnce(&mut Seq) -> &mut Vec<Tmpl>,
    ) -> Option<Tmpl> {
        let idx = cs.id() as usize;
        let v = slot(seq);
        if v.get(idx).is_some_and(|t| t.len > 0) {
            return None; // kept already (flows or a lost end made it go this way)
        }
        if v.len() <= idx {
            v.resize(idx + 1, Tmpl::default());
        }
        let flag = !self.opts.omit_needs_flag;
        let seq_id = seq.seq_id as u64;
        let iid = |v: &Vec<u32>| v.get(idx).copied().unwrap_or(0);
        let (cat, name, loc) = (
            iid(&seq.site_cat_iids),
            iid(&seq.name_iids),
            iid(&seq.loc_iids),
        );
        if cat == 0 || name == 0 || (self.opts.source_locations && loc == 0) {
            return None;
        }
        // As `fill_event` writes them.
        let mut te = Vec::with_capacity(TMPL_MAX);
        uint(&mut te, TE_CATEGORY_IIDS, cat as u64);
        uint(&mut te, TE_TYPE, ty);
        uint(&mut te, TE_NAME_IID, name as u64);
        if self.opts.source_locations {
            uint(&mut te, TE_SOURCE_LOCATION_IID, loc as u64);
        }
        let mut t = Tmpl::of(seq_id, flag, &te);
        t.plain = cs.arg_names.is_empty();
        t.ann = seq.site_ann_start.get(idx).copied().unwrap_or(0);
        Some(t)
    }

    /// The template of plain ends on `seq` (nothing in it is interned: it
    /// is kept for the sequence's life).
    #[cold]
    fn make_end_template(&self, seq: &mut Seq) {
        // As `end_event` writes it without track, args or flows.
        let mut te = Vec::with_capacity(2);
        uint(&mut te, TE_TYPE, TYPE_SLICE_END);
        seq.end_tmpl = Tmpl::of(seq.seq_id as u64, !self.opts.omit_needs_flag, &te);
    }
}

#[cfg(test)]
mod tests;
