//! Builds the test host: Perfetto's tracing service and consumer API from the
//! amalgamated source the `perfetto-sdk-sys` crate (Apache-2.0) vendors, one
//! C++ translation unit with `host/host.cc`. The crate's source comes from
//! crates.io through cargo itself (`cargo metadata` on a manifest that depends
//! on it, which downloads and checksums it into cargo's registry); set
//! `PERFETTO_SDK_SYS_DIR` to an unpacked copy to skip that. Compiling takes
//! about two minutes of one core, once: the binary is kept in the target
//! directory under a key of the source, the crate version, the compiler and
//! its flags, so test, clippy and bench builds share it (cache `target/` in
//! CI to skip it altogether).

use std::path::{Path, PathBuf};
use std::process::Command;

const SDK_SYS_VERSION: &str = "1.4.0";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=host/host.cc");
    println!("cargo:rerun-if-env-changed=PERFETTO_SDK_SYS_DIR");
    println!("cargo:rerun-if-env-changed=CXX");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let sdk = match std::env::var_os("PERFETTO_SDK_SYS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => fetch_sdk_sys(&out),
    };
    let amalgamation = sdk.join("libperfetto_c");
    if !amalgamation.join("perfetto_c.cc").exists() {
        panic!("{} has no perfetto_c.cc", amalgamation.display());
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| {
        let found = |c: &str| Command::new(c).arg("--version").output().is_ok();
        ["g++", "c++", "clang++"]
            .into_iter()
            .find(|c| found(c))
            .unwrap_or("g++")
            .into()
    });
    let flags = ["-std=c++17", "-O2", "-DNDEBUG", "-pthread", "-w"];
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("host/host.cc");
    // One build serves every profile and tool (test, clippy, bench): it is
    // kept in the target directory under a key of everything it depends on.
    let key = fnv1a(&[
        &std::fs::read(&source).unwrap(),
        SDK_SYS_VERSION.as_bytes(),
        amalgamation.to_string_lossy().as_bytes(),
        cxx.as_bytes(),
        flags.join(" ").as_bytes(),
    ]);
    let cache = target_dir(&out).join(format!("perfetto-test-host-{key:016x}"));
    let binary = cache.join("perfetto-test-host");
    if !binary.exists() {
        std::fs::create_dir_all(&cache).unwrap();
        let partial = cache.join(format!("perfetto-test-host.{}.partial", std::process::id()));
        let status = Command::new(&cxx)
            .args(flags)
            .arg("-I")
            .arg(&amalgamation)
            .arg(&source)
            .arg("-o")
            .arg(&partial)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C++ compiler {cxx}: {e}"));
        assert!(status.success(), "compiling the Perfetto test host failed");
        std::fs::rename(&partial, &binary).unwrap();
    }
    // Run again if the cached binary goes away.
    println!("cargo:rerun-if-changed={}", binary.display());
    println!("cargo:rustc-env=PERFETTO_TEST_HOST={}", binary.display());
}

/// The target directory (`<target>/[<triple>/]<profile>/build/<pkg>/out` is
/// OUT_DIR), or OUT_DIR itself if it has another shape.
fn target_dir(out: &Path) -> PathBuf {
    out.ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .and_then(|build| build.parent()?.parent())
        .map_or_else(|| out.to_path_buf(), Path::to_path_buf)
}

/// FNV-1a over `parts` (a cache key, not a checksum).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|p| p.iter().chain([&0u8]))
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
}

/// Downloads `perfetto-sdk-sys` with cargo and returns its source directory.
fn fetch_sdk_sys(out: &Path) -> PathBuf {
    let dir = out.join("fetch-perfetto-sdk-sys");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch-perfetto-sdk-sys\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[workspace]\n\n[dependencies]\nperfetto-sdk-sys = \"={SDK_SYS_VERSION}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo could not fetch perfetto-sdk-sys {SDK_SYS_VERSION}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "perfetto-sdk-sys")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("perfetto-sdk-sys in cargo metadata");
    Path::new(manifest).parent().unwrap().to_path_buf()
}
