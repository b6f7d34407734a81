//! Every instrumentation point here would panic if its arguments were
//! evaluated; with the `enable` feature off they are not even compiled.

fn boom() -> u64 {
    panic!("an argument of a compiled-out macro was evaluated")
}

#[ringtrace::traced(name = "compiled_out_attribute_xq7")]
fn traced(x: u64) -> u64 {
    ringtrace::trace_scope!("compiled_out_scope_xq7", v = boom());
    x * 2
}

#[ringtrace::traced]
async fn traced_async() -> u64 {
    3
}

fn main() {
    ringtrace::trace_scope!("cat_xq7", "compiled_out_scope2_xq7", a = boom(), b = boom());
    ringtrace::trace_instant!("compiled_out_instant_xq7", v = boom());
    ringtrace::trace_counter!("compiled_out_counter_xq7", boom());
    let _ = traced_async();
    println!("ok {}", traced(21));
}
