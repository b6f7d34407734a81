use super::*;
use prost::Message;
use std::io::Read;

/// Padding of every length a page can need is exactly that long and
/// reads as empty packets (Perfetto) or whitespace (JSON).
#[test]
fn padding_of_every_length() {
    for gap in 5..=PAGE {
        let mut out = Vec::new();
        assert_eq!(pad(&mut out, gap, Units::Perfetto), gap);
        assert_eq!(out.len() as u64, gap, "gap {gap}");
        let t = ringtrace_protos::Trace::decode(out.as_slice()).unwrap();
        assert!(!t.packet.is_empty());
        assert!(t
            .packet
            .iter()
            .all(|p| *p == ringtrace_protos::TracePacket::default()));
        let mut out = Vec::new();
        assert_eq!(pad(&mut out, gap, Units::Json), gap);
        assert!(out.len() as u64 == gap && out.iter().all(u8::is_ascii_whitespace));
    }
    assert_eq!(pad(&mut Vec::new(), 4, Units::Perfetto), 0);
}

/// Every multiple of PAGE in the laid-out file falls between two units
/// (or inside padding), for units of every size up to PAGE and padding
/// of every length: a file cut there parses (Perfetto with prost, JSON
/// with serde_json after appending `]`), and the whole file holds every
/// unit in order.
#[test]
fn no_small_unit_straddles_a_page() {
    let mut events = Vec::new();
    let mut next = 0u64;
    for len in (1..=PAGE as usize)
        .step_by(7)
        .chain([4095, 4096, 130, 129, 131])
    {
        // Perfetto: a packet of field 8 (timestamp) padded with field 3 bytes.
        let mut body = Vec::new();
        crate::encode::protowire::uint(&mut body, 8, next);
        next += 1;
        // Tag and length of the filler (up to 3) and of the packet (up to 3).
        let filler = len.saturating_sub(body.len() + 6);
        crate::encode::protowire::bytes(&mut body, 3, &vec![7u8; filler]);
        crate::encode::protowire::bytes(&mut events, 1, &body);
    }
    // Starts that keep the layout's rule (never one byte left in a page).
    for start in [0u64, 5, 4000, 4091] {
        let mut out = Vec::new();
        lay_out_or_copy(&events, start, Units::Perfetto, &mut out);
        // Cut the file at each page boundary: every prefix parses as a
        // Trace (field 2 skipped), and the whole holds every packet.
        let file = out;
        // Where each field of the file starts and ends.
        let mut fields = Vec::new();
        let mut at = 0;
        while at < file.len() {
            let n = framed_len(&file[at..]);
            fields.push((at, at + n));
            at += n;
        }
        let mut boundary = (PAGE - start % PAGE) % PAGE;
        while (boundary as usize) < file.len() {
            let b = boundary as usize;
            match fields.iter().find(|&&(a, e)| a < b && b < e) {
                // Only a unit too large to fit (more than PAGE - 5 bytes) may be cut.
                Some(&(a, e)) => assert!(
                    e - a > PAGE as usize - 5,
                    "start {start}: a field of {} bytes at {a} straddles {b}",
                    e - a
                ),
                None => {
                    ringtrace_protos::Trace::decode(&file[..b])
                        .unwrap_or_else(|e| panic!("start {start}: cut at {boundary}: {e}"));
                }
            }
            boundary += PAGE;
        }
        let all = ringtrace_protos::Trace::decode(file.as_slice()).unwrap();
        // Padding packets are empty to a reader.
        let (stamped, empty): (Vec<_>, Vec<_>) =
            all.packet.iter().partition(|p| p.timestamp.is_some());
        assert!(empty
            .iter()
            .all(|p| **p == ringtrace_protos::TracePacket::default()));
        let stamps: Vec<u64> = stamped.iter().map(|p| p.timestamp.unwrap()).collect();
        assert_eq!(stamps, (0..next).collect::<Vec<_>>());
    }
    // JSON: the same for event lines.
    let mut json = b"[\n".to_vec();
    for (i, len) in (1..=PAGE as usize)
        .step_by(13)
        .chain([4095, 4096])
        .enumerate()
    {
        if i > 0 {
            json.extend_from_slice(b",\n");
        }
        json.extend_from_slice(
            format!(
                "{{\"i\":{i},\"s\":\"{}\"}}",
                "x".repeat(len.saturating_sub(20))
            )
            .as_bytes(),
        );
    }
    for start in [0u64, 3, 4095] {
        // The file starts with `start` spaces (whitespace before `[`).
        let mut file = vec![b' '; start as usize];
        lay_out_or_copy(&json, start, Units::Json, &mut file);
        let mut count = 0;
        let mut boundary = PAGE;
        while (boundary as usize) < file.len() {
            let mut text = file[..boundary as usize].to_vec();
            if !text.contains(&b'[') {
                boundary += PAGE; // cut before the array opens
                continue;
            }
            text.push(b']');
            let v: serde_json::Value =
                serde_json::from_slice(&text).unwrap_or_else(|e| panic!("cut at {boundary}: {e}"));
            let n = v.as_array().unwrap().len();
            assert!(n >= count);
            count = n;
            boundary += PAGE;
        }
        let mut whole = file.clone();
        whole.push(b']');
        let v: serde_json::Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(
            v.as_array().unwrap().len(),
            (1..=PAGE as usize).step_by(13).count() + 2
        );
    }
}

/// The layout decided unit by unit, as first written: the reference the
/// faster [`lay_out`] must match byte for byte.
fn lay_out_unit_by_unit(buf: &[u8], offset: u64, units: Units, out: &mut Vec<u8>) {
    let m = min_pad(units);
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() {
        let end = i + match units {
            Units::Json => json_unit_len(&buf[i..]),
            Units::Perfetto => framed_len(&buf[i..]).max(1),
        };
        let len = (end - i) as u64;
        let left = PAGE - pos % PAGE;
        let bad_rest = |rest: u64| rest != 0 && rest < m;
        let gap = if len == PAGE || len <= PAGE - m {
            if left < PAGE && (len > left || bad_rest(left - len)) {
                left
            } else {
                0
            }
        } else if bad_rest((PAGE - (pos + len) % PAGE) % PAGE) {
            m
        } else {
            0
        };
        if gap > 0 {
            pos += pad(out, gap, units);
        }
        out.extend_from_slice(&buf[i..end]);
        pos += len;
        i = end;
    }
}

/// What `Sink::write` writes: `buf` laid out, or `buf` itself.
fn lay_out_or_copy(buf: &[u8], offset: u64, units: Units, out: &mut Vec<u8>) {
    let mut l = Layout::default();
    lay_out(buf, offset, units, &mut l);
    let (mut at, mut p) = (0, 0);
    for &(i, q) in &l.cuts {
        out.extend_from_slice(&buf[at..i]);
        out.extend_from_slice(&l.pads[p..q]);
        (at, p) = (i, q);
    }
    out.extend_from_slice(&buf[at..]);
}

/// Random streams of units of every size class (tiny, typical, near a
/// page, over a page), written from random offsets in several writes:
/// the same file as the reference, byte for byte.
#[test]
fn lay_out_matches_the_unit_by_unit_reference() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..300 {
        let size = |r: &mut dyn FnMut(u64) -> u64| match r(10) {
            0 => 1 + r(8),
            1..=6 => 20 + r(200),
            7 => PAGE - 8 + r(16),
            8 => PAGE - 200 + r(200),
            _ => PAGE + r(3 * PAGE),
        } as usize;
        let mut json = Vec::new();
        let mut packets = Vec::new();
        for n in 0..(1 + rand(400)) {
            let len = size(&mut rand);
            if n > 0 || round % 2 == 0 {
                json.extend_from_slice(b",\n");
            }
            json.extend_from_slice(format!("{{\"s\":\"{}\"}}", "x".repeat(len)).as_bytes());
            crate::encode::protowire::bytes(&mut packets, 1, &vec![7u8; len]);
        }
        if round % 2 == 1 {
            json.insert(0, b'[');
        }
        for (units, stream) in [(Units::Json, &json), (Units::Perfetto, &packets)] {
            let mut offset = rand(2 * PAGE);
            if units == Units::Perfetto && (1..5).contains(&(PAGE - offset % PAGE)) {
                offset += 5; // a file never leaves less than 5 bytes in a page
            }
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            // Several writes, each of whole units: split at unit starts.
            let mut at = 0;
            let mut pos = offset;
            while at < stream.len() {
                let mut end = at;
                // Writes of a few KiB too, as the flusher's passes.
                let most = if round % 3 == 0 { 3_000 } else { 20_000 };
                let want = at + rand(most) as usize;
                while end < stream.len() && (end == at || end < want) {
                    end += match units {
                        Units::Json => json_unit_len(&stream[end..]),
                        Units::Perfetto => framed_len(&stream[end..]),
                    };
                }
                let before = fast.len();
                lay_out_or_copy(&stream[at..end], pos, units, &mut fast);
                lay_out_unit_by_unit(&stream[at..end], pos, units, &mut slow);
                pos += (fast.len() - before) as u64;
                at = end;
            }
            assert!(
                fast == slow,
                "round {round}, {units:?} from offset {offset}"
            );
        }
    }
}

#[test]
fn compressed_packets_expand_to_the_same_stream() {
    let mut packets = Vec::new();
    for i in 0..50_000u64 {
        crate::encode::protowire::nested(&mut packets, 1, |p| {
            crate::encode::protowire::uint(p, 8, i);
            crate::encode::protowire::uint(p, 10, 1);
        });
    }
    let mut out = Vec::new();
    compress_packets(&packets, &mut out);
    assert!(out.len() < packets.len() / 4);
    let trace = ringtrace_protos::Trace::decode(out.as_slice()).unwrap();
    assert!(
        trace.packet.len() > 1,
        "large input is split into several packets"
    );
    let mut expanded = Vec::new();
    for p in &trace.packet {
        let blob = p.compressed_packets.as_ref().unwrap();
        flate2::read::ZlibDecoder::new(blob.as_slice())
            .read_to_end(&mut expanded)
            .unwrap();
    }
    assert_eq!(expanded, packets);
}
