//! What the integration tests of `ringtrace-archive` share: scratch
//! directories and the Python that has the official Perfetto schema
//! (`base`, shared with the SDK's tests), and the archive checks.
//!
//! Each test binary uses part of it.
#![allow(dead_code)]

pub mod archive;
mod base;

pub use base::{run_python, scratch};
