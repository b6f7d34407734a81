//! Creating the files a session writes: private by default
//! ([`Builder::file_mode`](crate::Builder::file_mode)), and the names the
//! session picks itself (the disk bound's parts, captures) made new, never
//! an existing file or a symlink planted at the name.
//!
//! A name the user gave ([`Builder::output`](crate::Builder::output),
//! [`rotate_output`](crate::rotate_output), [`dump_to`](crate::dump_to))
//! replaces an earlier file of that name, as `perfetto_cmd`'s output does.
//! A name the session numbers itself is created with `O_CREAT | O_EXCL |
//! O_NOFOLLOW`: if anything is at that name already (a file of an earlier
//! run or another user, a directory, a symlink, even a dangling one), the
//! number is skipped, so numbering continues past what is there.

#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The mode of the files a session creates unless told otherwise: the
/// owner's only (traces hold the program's data).
pub(crate) const DEFAULT_MODE: u32 = 0o600;

/// Names tried past taken ones before a numbered file gives up.
const MAX_TAKEN: u64 = 4096;

/// Creates (or truncates) the file the user named at `path`; a new file
/// gets `mode` (less the umask).
pub(crate) fn create_named(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
}

/// Creates a new file at `path`, failing with `AlreadyExists` if anything
/// is there (a symlink is not followed).
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(mode)
        .open(path)
}

/// Creates the first new file among `name(*next)`, `name(*next + 1)`, ...,
/// skipping names already taken; `*next` ends past the one made (or at the
/// name that failed). Fails with the first error other than a taken name,
/// or `AlreadyExists` after [`MAX_TAKEN`] taken names in a row.
pub(crate) fn create_numbered(
    next: &mut u64,
    mode: u32,
    name: impl Fn(u64) -> PathBuf,
) -> io::Result<(PathBuf, File)> {
    let mut taken = 0;
    loop {
        let path = name(*next);
        match create_new(&path, mode) {
            Ok(file) => {
                *next += 1;
                return Ok((path, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && taken < MAX_TAKEN => {
                taken += 1;
                *next += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn numbered_names_skip_whatever_is_there_and_follow_no_symlink() {
        let dir = std::env::temp_dir().join(format!("ringtrace-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let name = |n: u64| dir.join(format!("c-{n}"));
        std::fs::write(name(1), b"earlier run").unwrap();
        std::fs::create_dir(name(2)).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, name(3)).unwrap();
        std::os::unix::fs::symlink(dir.join("nowhere"), name(4)).unwrap();
        let mut next = 1;
        let (path, _) = create_numbered(&mut next, DEFAULT_MODE, name).unwrap();
        assert_eq!(path, name(5));
        assert_eq!(next, 6);
        assert_eq!(std::fs::read(name(1)).unwrap(), b"earlier run");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(
            !dir.join("nowhere").exists(),
            "a dangling symlink is not followed"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private: {mode:o}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
