//! Disk bounded: the session's file in numbered parts of at most about
//! [`Builder::max_file_bytes`](crate::Builder::max_file_bytes) each, the
//! oldest removed so that the parts kept stay within the bound.
//!
//! A part ends after a flusher pass that brings it within one pass's output
//! (the largest seen so far) of the limit; the switch is the one
//! `rotate_output` makes (`window::Windows`): the next part is a new
//! complete file, its encoder fresh (Perfetto sequences restart with their
//! incremental state cleared and descriptors sent again; a JSON part is a
//! document of its own), and every event is in exactly one part. After each
//! switch, the oldest parts are removed while the finished parts kept and a
//! whole next part would exceed `max_file_bytes * max_files`; so the parts
//! on disk never exceed that bound plus one pass's output (the current
//! part's last).
//!
//! What goes into a part, and what is dropped when it cannot take more, is
//! the guard's (`guard`).

#![forbid(unsafe_code)]

use crate::session::builder::Format;
use crate::session::file::create;
use crate::session::file::Target;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The limit and the parts written so far (the flusher's).
pub(crate) struct DiskLimit {
    max_bytes: u64,
    /// The format of every part (the session's).
    pub(crate) format: Format,
    files: u64,
    /// The session's path: part 0; part `n` is `stem.n.ext` beside it.
    base: PathBuf,
    /// The number the next part tries first (names taken are skipped).
    next: u64,
    /// Finished parts still on disk, oldest first, with their sizes.
    kept: VecDeque<(PathBuf, u64)>,
    /// The largest output of one pass so far, and the bytes of the current
    /// part when the last pass ended.
    pass_peak: u64,
    last_bytes: u64,
    /// After a failure (no next part, a part whose writes failed): when
    /// the next try may be, and the wait after that one.
    retry_at: Option<Instant>,
    backoff: Duration,
    /// Parts removed; parts that could not be made or written whole; the
    /// first error of either kind (kept whole until the stop reports it).
    pub(crate) removed: u64,
    pub(crate) failed: u64,
    pub(crate) first_error: Option<std::io::Error>,
    /// Whether the current trouble was said on stderr.
    said: bool,
}

/// The first wait after a part failed, and the longest.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LONGEST_RETRY: Duration = Duration::from_secs(1);

impl DiskLimit {
    pub(crate) fn new(base: PathBuf, max_bytes: u64, files: u64, format: Format) -> DiskLimit {
        DiskLimit {
            max_bytes,
            format,
            files: files.max(1),
            base,
            next: 1,
            kept: VecDeque::new(),
            pass_peak: 0,
            last_bytes: 0,
            retry_at: None,
            backoff: FIRST_RETRY,
            removed: 0,
            failed: 0,
            first_error: None,
            said: false,
        }
    }

    /// After a pass that left the current part at `bytes`: whether it ends
    /// now (within one pass's output of the limit).
    pub(crate) fn after_pass(&mut self, bytes: u64) -> bool {
        let pass = bytes.saturating_sub(self.last_bytes);
        self.last_bytes = bytes;
        self.pass_peak = self.pass_peak.max(pass);
        self.files >= 2 && bytes.saturating_add(self.pass_peak) >= self.max_bytes
    }

    /// Whether a next part may be tried now (not while waiting after a
    /// failure).
    pub(crate) fn may_try(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|at| now >= at)
    }

    /// Creates the next part (a new file: names taken by anything else are
    /// skipped, `files` has the details). On failure the error is kept and
    /// said once, and the next try waits.
    pub(crate) fn open_next(
        &mut self,
        create: impl Fn(&Path, std::fs::File) -> Target,
        mode: u32,
    ) -> Option<Target> {
        let base = self.base.clone();
        match create::create_numbered(&mut self.next, mode, |n| part_path(&base, n)) {
            Ok((path, file)) => Some(create(&path, file)),
            Err(e) => {
                let path = part_path(&self.base, self.next);
                self.trouble(format!(
                    "cannot make the trace's next part {}: {e}; the current part takes \
                     no more events (dropped, counted in Stats::events_dropped_disk) until \
                     one can be made",
                    path.display()
                ));
                self.failed += 1;
                self.first_error.get_or_insert(e);
                None
            }
        }
    }

    /// A part could not be written whole (its error): counted and kept; a
    /// full disk also gives up the oldest part kept, so recording goes on
    /// with the newest.
    pub(crate) fn part_failed(&mut self, e: std::io::Error) {
        use std::io::ErrorKind::{QuotaExceeded, StorageFull};
        self.failed += 1;
        self.trouble(String::new());
        if matches!(e.kind(), StorageFull | QuotaExceeded) {
            if let Some((old, _)) = self.kept.pop_front() {
                self.removed += 1;
                self.remove(&old);
            }
        }
        self.first_error.get_or_insert(e);
    }

    /// Something failed: the next try waits (longer each time), and the
    /// first failure of a run of them is said on stderr (`what`; empty: the
    /// sink said it).
    fn trouble(&mut self, what: String) {
        let now = Instant::now();
        self.retry_at = now.checked_add(self.backoff);
        self.backoff = (self.backoff * 2).min(LONGEST_RETRY);
        if !self.said && !what.is_empty() {
            eprintln!("ringtrace: {what}");
        }
        self.said = true;
    }

    /// The part at `path` was finished at `bytes` (`ok`: its every write
    /// succeeded); the next one starts empty. A part that holds nothing is
    /// removed. Removes the oldest parts past the bound.
    pub(crate) fn finished(&mut self, path: PathBuf, bytes: u64, ok: bool) {
        if ok {
            self.retry_at = None;
            self.backoff = FIRST_RETRY;
            self.said = false;
        }
        self.last_bytes = 0;
        if bytes == 0 {
            // A part that failed before holding anything: not one of the
            // parts kept or removed.
            self.remove(&path);
        } else {
            self.kept.push_back((path, bytes));
        }
        let bound = self.max_bytes.saturating_mul(self.files);
        loop {
            let total: u64 = self.kept.iter().map(|k| k.1).sum();
            let too_many = self.kept.len() as u64 + 1 > self.files;
            if !(too_many || total.saturating_add(self.max_bytes) > bound) {
                break;
            }
            let Some((old, _)) = self.kept.pop_front() else {
                break;
            };
            self.removed += 1;
            self.remove(&old);
        }
    }

    fn remove(&mut self, path: &Path) {
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                self.trouble(format!(
                    "cannot remove the trace's old part {}: {e}",
                    path.display()
                ));
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// Part `n` of the file at `base`: `trace.pftrace` → `trace.3.pftrace`.
pub(crate) fn part_path(base: &Path, n: u64) -> PathBuf {
    let stem = base.file_stem().unwrap_or_default().to_string_lossy();
    let name = match base.extension() {
        Some(ext) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{n}"),
    };
    base.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_numbered_before_the_extension() {
        let b = Path::new("/x/trace.pftrace");
        assert_eq!(part_path(b, 3), Path::new("/x/trace.3.pftrace"));
        assert_eq!(part_path(Path::new("t"), 1), Path::new("t.1"));
    }

    #[test]
    fn a_part_ends_one_pass_before_the_limit() {
        let mut d = DiskLimit::new("t.json".into(), 1000, 3, Format::Json);
        assert!(!d.after_pass(300)); // a pass of 300: 600 < 1000
        assert!(!d.after_pass(600)); // 900
        assert!(d.after_pass(700)); // 700 + 300
        d.last_bytes = 0; // the next part starts empty
        assert!(d.after_pass(650)); // a pass of 650
        let mut one = DiskLimit::new("t.json".into(), 1000, 1, Format::Json);
        assert!(!one.after_pass(5000), "one file: no parts");
    }

    #[test]
    fn the_oldest_parts_go_past_the_bound() {
        let dir = std::env::temp_dir().join(format!("ringtrace-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = dir.join("t.json");
        let mut d = DiskLimit::new(base.clone(), 1000, 3, Format::Json);
        for n in 0..5 {
            let p = if n == 0 {
                base.clone()
            } else {
                part_path(&base, n)
            };
            std::fs::write(&p, b"x").unwrap();
            // Parts of 900 bytes: two finished ones and a whole next part fit.
            d.finished(p, 900, true);
            let left: Vec<u64> = (0..=n)
                .filter(|&i| {
                    if i == 0 {
                        base.exists()
                    } else {
                        part_path(&base, i).exists()
                    }
                })
                .collect();
            assert_eq!(left, (n.saturating_sub(1)..=n).collect::<Vec<_>>());
        }
        assert_eq!(d.removed, 3);
        // Parts over the limit: only one finished part fits beside a next one.
        d.finished(part_path(&base, 5), 1200, true);
        assert_eq!(d.kept.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
