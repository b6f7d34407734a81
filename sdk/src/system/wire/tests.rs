use super::*;

#[test]
fn bind_frame_matches_the_documented_bytes() {
    let f = bind_frame(1, "ProducerPort");
    let mut want = vec![0x12, 0, 0, 0, 0x10, 0x01, 0x1a, 0x0e, 0x0a, 0x0c];
    want.extend_from_slice(b"ProducerPort");
    assert_eq!(f, want);
}

#[test]
fn truncated_messages_are_errors() {
    let f = invoke_frame(7, 1, 4, &[1, 2, 3], true);
    for cut in 5..f.len() {
        let _ = decode_frame(&f[4..cut]); // no panic
    }
    assert!(decode_command(&[0x2a, 0x05, 0x08]).is_err());
}

#[test]
fn register_and_update_carry_the_same_named_descriptor_with_its_id() {
    let req = track_event_descriptor(&["a", "b.c"]);
    let mut fs = fields(&req);
    let (n, d) = fs.next().unwrap().unwrap();
    assert_eq!(n, 1, "data_source_descriptor");
    assert!(fs.next().is_none());
    let (mut name, mut id, mut cats) = ("", 0, Vec::new());
    for f in fields(d.as_bytes()) {
        match f.unwrap() {
            (1, v) => name = v.as_str(),
            (7, v) => id = v.as_u64(),
            (6, ted) => {
                for (k, cat) in fields(ted.as_bytes()).map(Result::unwrap) {
                    assert_eq!(k, 1, "available_categories");
                    let (_, n) = fields(cat.as_bytes()).next().unwrap().unwrap();
                    cats.push(n.as_str());
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        (name, id, cats),
        ("track_event", TRACK_EVENT_ID, vec!["a", "b.c"])
    );
}

#[test]
fn packets_lose_their_sequence_id() {
    let mut stream = Vec::new();
    nested(&mut stream, 1, |p| {
        uint(p, 8, 5);
        uint(p, 10, 3);
        uint(p, 13, 1);
    });
    let mut got = Vec::new();
    for_each_packet(&stream, &mut Vec::new(), |seq, p| {
        got.push((seq, p.to_vec()))
    })
    .unwrap();
    assert_eq!(got, vec![(3, vec![0x40, 5, 0x68, 1])]);
}
