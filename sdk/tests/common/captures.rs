//! What the capture tests share: the capture files a session wrote, and
//! the check that a capture holds nothing outside its window.

use super::slices::Slice;
use std::path::{Path, PathBuf};

/// The files in `dir` named `<prefix>…<ext>`, sorted.
pub fn captures_in(dir: &Path, prefix: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with(prefix) && n.ends_with(ext)
        })
        .collect();
    v.sort();
    v
}

/// Fails unless every slice of the capture `file` lies within `window`
/// (`[from, to]`, ns).
pub fn assert_within(file: &Path, slices: &[Slice], window: (u64, u64)) {
    for s in slices {
        assert!(
            s.within(window),
            "{file:?}: {s:?} outside [{}, {}]",
            window.0,
            window.1
        );
    }
}
