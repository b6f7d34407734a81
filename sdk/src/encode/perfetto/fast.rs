//! The fast path of the commonest records: a scope's BEGIN and its END,
//! and INSTANTs, on a sequence whose incremental state is valid.
//!
//! Everything in such a packet but its timestamp (and its arguments) is
//! constant while the sequence's interning lasts: the sequence id and
//! flags, and the track event (category, type, name and source location
//! iids). So the first begin (or instant) of a call site on a sequence
//! takes the general path (which interns its strings) and then leaves a
//! template of those bytes; later ones are the framing, the varint delta
//! and a copy of the template (then the arguments, written by `direct`).
//! Templates are forgotten with the interning (`Seq::clear_interning`), so
//! a reset always takes the general path again. Anything unusual (flows
//! waiting, a lost record to close, a reset due, no template yet) takes
//! the general path, which writes the same bytes (tests:
//! `fast_path_writes_what_the_general_path_writes`).
//!
//! A batch's records are taken in runs ([`PerfettoEncoder::fast_run`])
//! that keep the sequence clock, the count of events and `out`'s position
//! ([`Cursor`]) in locals. A packet is written into `out`'s spare capacity
//! (at least [`PACKET_MAX`] bytes) and then counted in: one capacity check
//! and a few fixed-size stores per packet, no capacity check per field. A
//! begin's arguments are written the same way by `direct`.

use super::annotations::{annotations, const_annotation};
use super::async_tracks::TrackField;
use super::fields::{
    P_SEQUENCE_FLAGS, P_SEQUENCE_ID, P_TIMESTAMP, P_TRACK_EVENT, SEQ_NEEDS_INCREMENTAL_STATE,
    TE_CATEGORY_IIDS, TE_NAME_IID, TE_SOURCE_LOCATION_IID, TE_TYPE, TYPE_INSTANT, TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
};
use super::{PerfettoEncoder, Seq};
use crate::encode::protowire::{
    len_field_len, len_head, patch_len, uint, uint_len, varint2, Spare,
};
use crate::encode::Context;
use crate::record::callsite::Callsite;
use crate::record::clock::Calibration;
use crate::record::header::{header_kind, header_len, header_payload};
use crate::record::layout::parse;
use crate::record::layout::{KIND_ASYNC_BEGIN, KIND_ASYNC_END, KIND_BEGIN, KIND_END, KIND_INSTANT};
use std::mem::MaybeUninit;

mod direct;
use direct::{direct_annotations, ANN_MAX_HEAD, SLACK};

/// Largest template: what a packet holds after its timestamp.
const TMPL_MAX: usize = 32;
/// Largest fast packet: tag, one-byte length, timestamp tag, a 10-byte
/// varint, the template.
const PACKET_MAX: usize = 3 + 10 + TMPL_MAX;
/// A track uuid's field as `TrackField` holds it (its tag and varint, at
/// most 11 bytes, in 16).
const TRACK_MAX: usize = 16;

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

/// `out` written at a position kept in locals (its buffer, the position,
/// its capacity): no load of the `Vec`'s fields per packet, none reloaded
/// after each store through the buffer. The position is counted into
/// `out` (`set_len`) by [`Cursor::with_vec`] before anything else writes
/// to `out` (and taken again after it), and when the cursor is dropped.
///
/// Invariant (what every `unsafe` below relies on): `ptr` and `cap` are
/// `out`'s buffer and capacity, `out.len() <= len <= cap`, and the bytes
/// `..len` of the buffer are initialised.
struct Cursor<'a> {
    out: &'a mut Vec<u8>,
    ptr: *mut u8,
    len: usize,
    cap: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn new(out: &'a mut Vec<u8>) -> Self {
        Cursor {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            cap: out.capacity(),
            out,
        }
    }

    /// Makes room for at least `n` bytes after the position.
    #[inline(always)]
    fn room(&mut self, n: usize) {
        if self.cap - self.len < n {
            self.grow(n);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        self.with_vec(|out| out.reserve(n.max(GROW)));
    }

    /// Runs `f` on `out`, its length the position (a writer of its own:
    /// it may append and reallocate, never shorten `out`), then takes
    /// `out` as `f` left it.
    #[inline(always)]
    fn with_vec<R>(&mut self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.sync();
        let r = f(self.out);
        self.ptr = self.out.as_mut_ptr();
        self.len = self.out.len();
        self.cap = self.out.capacity();
        r
    }

    /// Counts the position into `out`.
    #[allow(unsafe_code)]
    #[inline(always)]
    fn sync(&mut self) {
        // SAFETY: by the invariant, `len <= cap` and the bytes `..len`
        // are initialised.
        unsafe { self.out.set_len(self.len) };
    }

    /// The bytes after the position (the spare capacity).
    #[allow(unsafe_code)]
    #[inline(always)]
    fn spare(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: by the invariant, `ptr + len .. ptr + cap` lies in
        // `out`'s buffer; `MaybeUninit` bytes need no initialisation; the
        // slice borrows the cursor mutably, so nothing else reaches those
        // bytes while it lives.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.add(self.len).cast(), self.cap - self.len)
        }
    }

    /// Counts in the `n` bytes after the position.
    ///
    /// # Safety
    /// Those bytes are initialised and `n <= cap - len` (as a [`Spare`]
    /// over [`Cursor::spare`] leaves them at its `n`).
    #[allow(unsafe_code)]
    #[inline(always)]
    unsafe fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Appends a packet: `delta` on the sequence clock, then `t`'s bytes.
    /// One capacity check, a few stores and a fixed-size copy.
    #[allow(unsafe_code)]
    #[inline(always)]
    fn put(&mut self, delta: u64, t: &Tmpl) {
        self.room(PACKET_MAX);
        // SAFETY: the room holds at least PACKET_MAX bytes (made above),
        // `write_packet` writes only those and initialises the `n` it
        // returns, so the invariant holds at `len + n`.
        unsafe {
            let n = write_packet(self.ptr.add(self.len), delta, t);
            self.len += n;
        }
    }
}

impl Cursor<'_> {
    /// Appends a packet of `t` whose track event also names a track
    /// (`field`, after the template's fields, as `fill_event` writes it for
    /// a site without arguments and `end_event` for an end without them).
    #[allow(unsafe_code)]
    #[inline(always)]
    fn put_on_track(&mut self, delta: u64, t: &Tmpl, field: &TrackField) {
        self.room(PACKET_MAX + TRACK_MAX);
        // SAFETY: the room holds PACKET_MAX + TRACK_MAX bytes (made above):
        // `write_packet` writes at most PACKET_MAX of them and initialises
        // the `n` it returns; the field's 16 bytes (its `len` kept, at most
        // 11) follow them. Both lengths stay one byte: the packet is at
        // most 2 + 11 + TMPL_MAX + 11 < 128 bytes, and `te_at + 1` is the
        // template's track event length byte (`Tmpl::of`).
        unsafe {
            let dst = self.ptr.add(self.len);
            let n = write_packet(dst, delta, t);
            std::ptr::copy_nonoverlapping(field.bytes.as_ptr(), dst.add(n), 16);
            let grew = field.len;
            *dst.add(1) += grew;
            *dst.add(n - t.len as usize + t.te_at as usize + 1) += grew;
            self.len += n + grew as usize;
        }
    }
}

impl Cursor<'_> {
    /// Appends `field` to the track event of the packet written from
    /// `start` (a packet of template `t`, its track event last): both
    /// lengths grow by the field's. In place when both stay one byte (the
    /// usual packet), else the packet is written again (`relength`).
    #[allow(unsafe_code)]
    #[inline(always)]
    fn append_to_track_event(&mut self, start: usize, t: &Tmpl, field: &TrackField) {
        self.room(TRACK_MAX);
        let k = field.len as usize;
        let body = self.len - start - 2;
        // SAFETY: the packet's bytes `start..len` are initialised (the
        // cursor's invariant) and `room` made TRACK_MAX bytes writable
        // after `len`, where the field's 16 bytes go (`len` then grows by
        // the `k` of them that count). A one-byte length equal to the
        // body's marks the short form `begin_with_args` writes: its tag,
        // its length, the timestamp's tag and varint (whose bytes end
        // within the packet: the template follows it), then the template,
        // whose track event's length byte is at `te_at + 1`.
        unsafe {
            let p = self.ptr.add(start);
            if *p.add(1) as usize == body && body + k < 0x80 {
                let mut d = 3;
                while *p.add(d) & 0x80 != 0 {
                    d += 1;
                }
                let te_len = p.add(d + 1 + t.te_at as usize + 1);
                std::ptr::copy_nonoverlapping(field.bytes.as_ptr(), p.add(body + 2), TRACK_MAX);
                *p.add(1) += k as u8;
                *te_len += k as u8;
                self.len += k;
                return;
            }
        }
        self.with_vec(|out| relength(out, start, t, field));
    }
}

/// [`Cursor::append_to_track_event`] for a packet whose lengths take more
/// than a byte (or will): read back and written again.
#[cold]
#[inline(never)]
fn relength(out: &mut Vec<u8>, start: usize, t: &Tmpl, field: &TrackField) {
    let varint_end = |b: &[u8], mut i: usize| -> usize {
        while b[i] & 0x80 != 0 {
            i += 1;
        }
        i + 1
    };
    let packet = out[start..].to_vec();
    let body_at = varint_end(&packet, 1); // after Trace.packet's length
    let te_tag = varint_end(&packet, body_at + 1) + t.te_at as usize; // after the timestamp
    let te_at = varint_end(&packet, te_tag + 1); // after the track event's length
    let mut te = packet[te_at..].to_vec();
    te.extend_from_slice(&field.bytes[..field.len as usize]);
    let mut body = packet[body_at..te_tag].to_vec();
    len_head(&mut body, P_TRACK_EVENT, te.len());
    body.extend_from_slice(&te);
    out.truncate(start);
    len_head(out, 1, body.len());
    out.extend_from_slice(&body);
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
    cur: &mut Cursor<'_>,
) -> u64 {
    let begin = cal.to_ns(begin_ticks).max(last);
    let end = cal.to_ns(end_ticks).max(begin);
    cur.room(2 * PACKET_MAX);
    // SAFETY: the room holds at least 2 * PACKET_MAX bytes (made above);
    // each `write_packet` writes at most PACKET_MAX of them, the second
    // after the first's `n0`, and initialises what it returns, so the
    // cursor's invariant holds at `len + n0 + n1`.
    unsafe {
        let dst = cur.ptr.add(cur.len);
        let n0 = write_packet(dst, begin - last, t);
        let n1 = write_packet(dst.add(n0), end - begin, end_t);
        cur.commit(n0 + n1);
    }
    end
}

impl Drop for Cursor<'_> {
    fn drop(&mut self) {
        self.sync();
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
    // The deltas of busy threads are short: one or two bytes, stored at
    // once; longer ones a byte at a time.
    let mut n = 3;
    let mut v = delta;
    // SAFETY (all stores below): a varint of a u64 takes at most 10 bytes,
    // so every byte written lies in `dst[..3 + 10 + TMPL_MAX]`, which the
    // caller guarantees is writable.
    unsafe {
        if v < 0x80 {
            *dst.add(3) = v as u8;
            n = 4;
        } else if v < 0x4000 {
            dst.add(3)
                .cast::<[u8; 2]>()
                .write_unaligned((varint2(v) as u16).to_le_bytes());
            n = 5;
        } else {
            while v >= 0x80 {
                *dst.add(n) = v as u8 | 0x80;
                v >>= 7;
                n += 1;
            }
            *dst.add(n) = v as u8;
            n += 1;
        }
        std::ptr::copy_nonoverlapping(t.bytes.as_ptr(), dst.add(n), TMPL_MAX);
        let total = n + t.len as usize;
        *dst = 0x0a; // Trace.packet
        *dst.add(1) = (total - 2) as u8; // at most 43: one byte
        *dst.add(2) = (P_TIMESTAMP << 3) as u8;
        total
    }
}

impl PerfettoEncoder {
    /// Encodes the records of one batch of `seq`: runs of plain ends and
    /// of begins and instants with templates by [`Self::fast_run`],
    /// everything else through [`Self::record`].
    pub(super) fn records(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        words: &[u64],
        out: &mut Vec<u8>,
    ) {
        let mut pos = 0;
        while pos < words.len() {
            if seq.valid && seq.flows.is_empty() && seq.ext.no_flows_waiting() {
                pos += self.fast_run(ctx, seq, &words[pos..], out);
                if pos >= words.len() {
                    break;
                }
                // Async ranges (and the instants between them: a stream
                // of `tracing` spans drawn as lifetime slices) take a loop
                // of their own, so the loop of scopes stays as it was.
                let taken = self.fast_async_run(ctx, seq, &words[pos..], out);
                if taken > 0 {
                    pos += taken;
                    continue;
                }
            }
            let hdr = words[pos];
            let len = header_len(hdr) as usize;
            if len < 2 || pos + len > words.len() {
                break; // cut: as `parse`, nothing after it is read
            }
            if let Some(rec) = parse(&words[pos..pos + len]).next() {
                self.record(ctx, seq, rec, out);
            }
            pos += len;
        }
    }

    /// Encodes records from the start of `words` while each one is a
    /// plain END of the innermost open scope, or a BEGIN (orphaning
    /// nothing) or an INSTANT on the thread's track of a call site with a
    /// template; the words taken (0: the first is none of them). Its
    /// caller has checked that the sequence is valid and that no flow
    /// waits (nothing here changes either). The sequence clock, the count
    /// of events and `out`'s position are kept in locals for the run.
    ///
    /// Each packet is what the general path writes for its record (the
    /// templates are its bytes; tests: `fast_path_writes_what_the_general_path_writes`).
    fn fast_run(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        words: &[u64],
        out: &mut Vec<u8>,
    ) -> usize {
        if seq.end_tmpl.len == 0 {
            self.make_end_template(seq);
        }
        let cal: Calibration = ctx.cal.clone();
        let mut last = seq.last_ns;
        let mut events = 0u64;
        let mut cur = Cursor::new(out);
        // The records not taken yet.
        let mut rest = words;
        while let Some(&hdr) = rest.first() {
            let len = header_len(hdr) as usize;
            let Some((rec, after)) = rest.split_at_checked(len) else {
                break; // cut
            };
            let [_, ticks, args @ ..] = rec else {
                break;
            };
            let kind = header_kind(hdr);
            let payload = header_payload(hdr);
            if kind == KIND_END && len == 2 {
                if seq.stack.try_end_top(payload as u32).is_none() {
                    break;
                }
                let ts = cal.to_ns(*ticks).max(last);
                cur.put(ts - last, &seq.end_tmpl);
                last = ts;
                events += 1;
            } else if kind == KIND_BEGIN {
                let site = (payload & crate::record::layout::MAX_SITE_ID as u64) as u32;
                let depth = (payload >> 24) as u32;
                let Some(t) = seq.begin_tmpl.get(site as usize) else {
                    break;
                };
                // Nothing orphaned: checked once, for the leaf and the push.
                if t.len == 0 || !seq.stack.fits(depth) {
                    break;
                }
                if t.plain && args.is_empty() {
                    // A leaf (its end next): both packets, the scope never
                    // on the stack.
                    if let Some(&[end_hdr, _]) = after.first_chunk::<2>() {
                        if header_kind(end_hdr) == KIND_END
                            && header_len(end_hdr) == 2
                            && header_payload(end_hdr) as u32 == depth
                        {
                            // It and the same leaf again (a scope in a
                            // loop): only their two headers to check.
                            let end_t = &seq.end_tmpl;
                            while let Some(&[h, begin_ticks, e, end_ticks]) = rest.first_chunk() {
                                if h != hdr || e != end_hdr {
                                    break;
                                }
                                last = leaf(&cal, begin_ticks, end_ticks, last, t, end_t, &mut cur);
                                events += 2;
                                rest = &rest[4..];
                            }
                            continue;
                        }
                    }
                    let ts = cal.to_ns(*ticks).max(last);
                    cur.put(ts - last, t);
                    seq.stack.push_plain(depth, site, ts);
                    last = ts;
                } else {
                    // A template exists only for a site the cache returned.
                    let Some(cs) = ctx.sites.get(site) else {
                        break;
                    };
                    let t = *t;
                    let ts = cal.to_ns(*ticks).max(last);
                    seq.stack.push_plain(depth, site, ts);
                    self.begin_with_args(seq, cs, args, ts - last, &t, &mut cur);
                    last = ts;
                }
                events += 1;
            } else if kind == KIND_INSTANT {
                match self.fast_instant(ctx, seq, &cal, payload, *ticks, args, last, &mut cur) {
                    Some(ts) => last = ts,
                    None => break,
                }
                events += 1;
            } else {
                break;
            }
            rest = after;
        }
        seq.last_ns = last;
        self.stats.events += events;
        words.len() - rest.len()
    }

    /// An instant of a site with a template at the sequence clock `last`;
    /// the clock after it, or `None` (nothing written) for the general path.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fast_instant(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        cal: &Calibration,
        payload: u64,
        ticks: u64,
        args: &[u64],
        last: u64,
        cur: &mut Cursor<'_>,
    ) -> Option<u64> {
        let site = (payload & crate::record::layout::MAX_SITE_ID as u64) as u32;
        let t = seq.instant_tmpl.get(site as usize)?;
        if t.len == 0 {
            return None;
        }
        let ts = cal.to_ns(ticks).max(last);
        if t.plain {
            // No site needed (its template was made from it).
            cur.put(ts - last, t);
        } else {
            // A template exists only for a site the cache returned.
            let cs = ctx.sites.get(site)?;
            let t = *t;
            self.begin_with_args(seq, cs, args, ts - last, &t, cur);
        }
        Some(ts)
    }

    /// As [`Self::fast_run`], for async ranges' begins and plain ends
    /// (`fast_async`) and the instants between them; the words taken.
    #[inline(never)]
    fn fast_async_run(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        words: &[u64],
        out: &mut Vec<u8>,
    ) -> usize {
        if seq.end_tmpl.len == 0 {
            self.make_end_template(seq);
        }
        let cal: Calibration = ctx.cal.clone();
        let mut last = seq.last_ns;
        let mut events = 0u64;
        let mut cur = Cursor::new(out);
        let mut rest = words;
        while let Some(&hdr) = rest.first() {
            let len = header_len(hdr) as usize;
            let Some((rec, after)) = rest.split_at_checked(len) else {
                break; // cut
            };
            let kind = header_kind(hdr);
            let next = if kind == KIND_ASYNC_BEGIN || kind == KIND_ASYNC_END {
                self.fast_async(ctx, seq, &cal, rec, last, &mut cur)
            } else if let (KIND_INSTANT, [_, ticks, args @ ..]) = (kind, rec) {
                let payload = header_payload(hdr);
                self.fast_instant(ctx, seq, &cal, payload, *ticks, args, last, &mut cur)
            } else {
                None
            };
            let Some(ts) = next else {
                break;
            };
            last = ts;
            events += 1;
            rest = after;
        }
        seq.last_ns = last;
        self.stats.events += events;
        words.len() - rest.len()
    }

    /// An async range's begin (the site's begin template, its arguments,
    /// its track's field) or plain end (nothing recorded since its begin)
    /// at the sequence clock `last`, on its pooled track (`async_tracks`);
    /// the clock after it, or `None` (nothing written or taken) for the
    /// general path.
    #[inline(always)]
    fn fast_async(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        cal: &Calibration,
        rec: &[u64],
        last: u64,
        cur: &mut Cursor<'_>,
    ) -> Option<u64> {
        let [hdr, ticks, id, args @ ..] = rec else {
            return None;
        };
        let site = (header_payload(*hdr) & crate::record::layout::MAX_SITE_ID as u64) as u32;
        let cs = ctx.sites.get(site)?;
        if header_kind(*hdr) == KIND_ASYNC_BEGIN {
            let t = *seq.begin_tmpl.get(site as usize)?;
            let raw = cal.to_ns(*ticks);
            // Begun in the past (found async later): the general path.
            if t.len == 0 || raw < last {
                return None;
            }
            let tracks = &mut self.async_tracks;
            let track = tracks.begin(ctx.process, seq.seq_id, site, cs.name, *id, raw);
            if !seq.is_described(track) {
                cur.with_vec(|out| self.async_track(ctx, seq, cs, track, out));
            }
            if t.plain && args.is_empty() {
                cur.put_on_track(raw - last, &t, self.async_tracks.field(track));
            } else {
                // The thread's begin, then the track after its arguments,
                // as `fill_event` writes it.
                let start = cur.len;
                self.begin_with_args(seq, cs, args, raw - last, &t, cur);
                cur.append_to_track_event(start, &t, self.async_tracks.field(track));
            }
            return Some(raw);
        }
        if !args.is_empty() || !cs.arg_names.is_empty() {
            return None; // an end carrying args, or naming them: the general path
        }
        let ts = cal.to_ns(*ticks).max(last);
        let track = self.async_tracks.end(ctx.process, seq.seq_id, *id, ts);
        if !seq.is_described(track) {
            cur.with_vec(|out| self.async_track(ctx, seq, cs, track, out));
        }
        cur.put_on_track(ts - last, &seq.end_tmpl, self.async_tracks.field(track));
        Some(ts)
    }

    /// A begin (or instant) whose call site has arguments (or whose record
    /// has words the site does not name): the template's fields, then the
    /// annotations. Scalars and strings are written straight into `out`'s
    /// spare capacity ([`Spare`]) with one-byte lengths patched afterwards
    /// (a body of 128 bytes or more is moved forward to make room: the
    /// bytes sizing first would have written); anything else (a container,
    /// a name not interned) by [`Self::begin_with_args_general`].
    fn begin_with_args(
        &mut self,
        seq: &mut Seq,
        cs: &'static Callsite,
        args: &[u64],
        delta: u64,
        t: &Tmpl,
        cur: &mut Cursor<'_>,
    ) {
        let names = cs.arg_names.len();
        if names != 0 && names * 64 < args.len() {
            // More words than the bound below counts.
            return cur.with_vec(|out| self.begin_with_args_general(seq, cs, args, delta, t, out));
        }
        // What `direct_annotations` can write (see there), the 8 bytes
        // a word store may write past the last byte kept, and [`SLACK`].
        let bound = PACKET_MAX + 8 + SLACK + ANN_MAX_HEAD * names + 8 * args.len();
        cur.room(bound);
        // The whole spare capacity (at least `bound` bytes): no second
        // check of the bound.
        let mut w = Spare {
            buf: cur.spare(),
            n: 0,
        };
        // Trace.packet (its length patched), the timestamp's tag and delta
        // (one or two bytes, the usual, in the same store).
        let head = 0x0a | ((P_TIMESTAMP << 3) as u64) << 16;
        if delta < 0x80 {
            w.word(head | delta << 24, 4);
        } else if delta < 0x4000 {
            w.word(head | varint2(delta) << 24, 5);
        } else {
            w.word(head, 3);
            w.varint(delta);
        }
        // The template: the sequence's fields, the track event's tag, its
        // length (patched), its fields.
        let te_start = w.n + t.te_at as usize + 2;
        w.fixed(&t.bytes, t.len as usize);
        if names != 0 && !direct_annotations(seq, cs, t.ann, args, &mut w) {
            return cur.with_vec(|out| self.begin_with_args_general(seq, cs, args, delta, t, out));
        }
        let n = w.n;
        // The usual packet (< 128 bytes): both lengths take their one byte.
        let short = n - 2 < 0x80;
        if short {
            w.buf[te_start - 1] = MaybeUninit::new((n - te_start) as u8);
            w.buf[1] = MaybeUninit::new((n - 2) as u8);
        }
        let start = cur.len;
        // SAFETY: `Spare` writes its bytes in order from the start of the
        // spare capacity, each one through a bounds-checked index into it,
        // so the `n` bytes after the position are initialised and
        // `n <= cap - len`.
        #[allow(unsafe_code)]
        unsafe {
            cur.commit(n)
        };
        if !short {
            cur.with_vec(|out| {
                patch_len(out, start + te_start);
                patch_len(out, start + 2);
            });
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
        // The constant arguments, as `fill_event` writes them (before the
        // recorded ones): part of every packet of the site.
        let ann = seq.site_ann_start.get(idx).copied().unwrap_or(0);
        if !cs.const_args.is_empty() {
            let start = (ann as usize).checked_sub(1)? + cs.arg_names.len();
            let iids = seq.site_ann_iids.get(start..start + cs.const_args.len())?;
            for (&iid, &(_, value)) in iids.iter().zip(cs.const_args) {
                if iid == 0 {
                    return None;
                }
                const_annotation(&mut te, iid, value);
            }
        }
        let mut t = Tmpl::of(seq_id, flag, &te);
        t.plain = cs.arg_names.is_empty();
        t.ann = ann;
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
