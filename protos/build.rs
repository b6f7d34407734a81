//! Compiles `proto/perfetto/trace/*.proto` into prost types in `OUT_DIR`.
//!
//! The .proto files are parsed by `protox` (a protobuf compiler written in
//! Rust), so no system `protoc` is needed. The resulting descriptor set is
//! handed to `prost-build`, which writes `perfetto.protos.rs`. The encoded
//! descriptor set is also written to `OUT_DIR` for reflection-based checks.

use std::{env, error::Error, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn Error>> {
    let include = PathBuf::from("proto");
    let dir = include.join("perfetto").join("trace");
    println!("cargo:rerun-if-changed={}", include.display());
    println!("cargo:rerun-if-changed=build.rs");

    let mut files: Vec<PathBuf> = fs::read_dir(&dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|ext| ext == "proto"));
    files.sort();

    let fds = protox::compile(&files, [&include])?;
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    fs::write(
        out_dir.join("perfetto_protos_descriptor.bin"),
        fds.encode_to_vec(),
    )?;

    prost_build::Config::new()
        .out_dir(&out_dir)
        .compile_fds(fds)?;
    Ok(())
}
