//! The root package (`ringtrace-suite`: examples, integration tests,
//! benchmarks) has no library of its own. This target exists so that the
//! front page's code is compiled by the tests: `cargo test --doc -p
//! ringtrace-suite` builds every Rust block of `README.md` against the
//! workspace's crates (the `ringtrace` package cannot include a file from
//! outside its own directory and still be published).

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
