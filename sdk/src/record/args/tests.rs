use super::*;

fn roundtrip<T: TraceValue + ?Sized>(v: &T) -> Value {
    let mut w = Vec::new();
    v.encode(&mut w);
    assert_eq!(w.len(), v.words());
    ArgReader::new(&w).value()
}

#[test]
fn strings_of_every_length_round_trip() {
    let text = "abcdefghijklmnopqrstuvwxyzé€😀0123456789";
    for end in 0..=text.len() {
        if let Some(s) = text.get(..end) {
            assert_eq!(roundtrip(s), Value::Str(s.into()));
        }
    }
}

#[test]
fn values_round_trip() {
    assert_eq!(roundtrip(&-5i32), Value::Int(-5));
    assert_eq!(roundtrip(&u64::MAX), Value::Uint(u64::MAX));
    assert_eq!(roundtrip(&1.5f64), Value::Double(1.5));
    assert_eq!(roundtrip(&true), Value::Bool(true));
    assert_eq!(roundtrip("héllo, wörld"), Value::Str("héllo, wörld".into()));
    assert_eq!(roundtrip(""), Value::Str(String::new()));
    assert_eq!(roundtrip(&None::<i32>), Value::Null);
    assert_eq!(roundtrip(&'é'), Value::Str("é".into()));
    let mut m = BTreeMap::new();
    m.insert("a", vec![1u8, 2]);
    assert_eq!(
        roundtrip(&m),
        Value::Dict(vec![(
            "a".into(),
            Value::Array(vec![Value::Uint(1), Value::Uint(2)])
        )])
    );
    let p = 0x1234usize as *const u8;
    assert_eq!(roundtrip(&p), Value::Pointer(0x1234));
}

#[test]
fn skip_value_consumes_nested_values_whole() {
    let mut m = BTreeMap::new();
    m.insert("a", vec![vec![1u8], vec![2, 3]]);
    let mut w = Vec::new();
    m.encode(&mut w);
    7i32.encode(&mut w);
    let mut r = ArgReader::new(&w);
    r.skip_value();
    assert_eq!(r.next(), ArgValue::Int(7));
}
