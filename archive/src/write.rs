//! The writing path of [`Archive`]: every member loaded and checked, the
//! manifest planned, then the container written (atomically to a path).

use super::{
    sniff, tar, zip, Archive, ArchiveError, Manifest, Member, MemberInfo, MemberKind, ZipMethod,
    MANIFEST_NAME,
};
use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An archive ready to write: the final manifest and every member's bytes.
pub(super) struct Prepared<'a> {
    pub(super) manifest: Manifest,
    data: Vec<Cow<'a, [u8]>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Container {
    Tar,
    Zip,
    Any,
}

impl Archive {
    fn mtime_secs(&self) -> u64 {
        self.mtime.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
    }

    pub(super) fn emit_tar(&self, p: &Prepared<'_>, out: impl Write) -> Result<(), ArchiveError> {
        let io = |e| ArchiveError::io(None, e);
        let mut w = tar::TarWriter::new(out, self.mtime_secs());
        w.append(MANIFEST_NAME, p.manifest.to_json().as_bytes())
            .map_err(io)?;
        for (m, data) in self.members.iter().zip(&p.data) {
            w.append(&m.name, data).map_err(io)?;
        }
        w.finish().map_err(io)?;
        Ok(())
    }

    pub(super) fn emit_zip(&self, p: &Prepared<'_>, out: impl Write) -> Result<(), ArchiveError> {
        let mut w = zip::ZipWriter::new(out, self.mtime_secs());
        w.append(
            MANIFEST_NAME,
            p.manifest.to_json().as_bytes(),
            ZipMethod::Stored,
        )?;
        for (m, data) in self.members.iter().zip(&p.data) {
            w.append(&m.name, data, self.zip_method)?;
        }
        w.finish()?;
        Ok(())
    }

    /// Loads and checks every member, builds the final manifest, validates it.
    pub(super) fn prepare(&self, container: Container) -> Result<Prepared<'_>, ArchiveError> {
        // Names.
        let mut names = std::collections::HashSet::from([MANIFEST_NAME]);
        for m in &self.members {
            check_member_name(&m.name, container)?;
            if !names.insert(m.name.as_str()) {
                return Err(ArchiveError::DuplicateMember(m.name.clone()));
            }
        }
        // Contents.
        let mut data = Vec::with_capacity(self.members.len());
        let mut infos = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let bytes = m.load()?;
            let kind = sniff(&bytes);
            if !(self.allow_unrecognized && kind == MemberKind::Unrecognized) {
                check_member_kind(m, &kind)?;
            }
            if container == Container::Tar && bytes.len() as u64 > tar::MAX_SIZE {
                return Err(ArchiveError::TooLarge {
                    member: m.name.clone(),
                    limit: "a ustar member holds less than 8 GiB",
                });
            }
            infos.push(MemberInfo {
                name: m.name.clone(),
                kind,
                len: bytes.len() as u64,
            });
            data.push(bytes);
        }
        let manifest = self.plan(&infos)?;
        Ok(Prepared { manifest, data })
    }
}

/// Creates `path` through a temporary sibling renamed into place.
pub(super) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<(), ArchiveError>,
) -> Result<(), ArchiveError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".partial-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let file = std::fs::File::create(&tmp).map_err(|e| ArchiveError::io(Some(&tmp), e))?;
        let mut w = std::io::BufWriter::new(file);
        write(&mut w)?;
        let file = w
            .into_inner()
            .map_err(|e| ArchiveError::io(Some(&tmp), e.into_error()))?;
        file.sync_all()
            .map_err(|e| ArchiveError::io(Some(&tmp), e))?;
        std::fs::rename(&tmp, path).map_err(|e| ArchiveError::io(Some(path), e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Member names the readers take as given: relative, `/`-separated, no
/// empty, `.` or `..` component, no component starting with `.` (ignored by
/// trace_processor), no control characters; at most 99 bytes in a TAR.
fn check_member_name(name: &str, container: Container) -> Result<(), ArchiveError> {
    let bad = |reason: &str| {
        Err(ArchiveError::InvalidMemberName {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.chars().any(|c| c.is_control()) {
        return bad("it contains control characters");
    }
    if name.contains('\\') {
        return bad("use '/' to separate directories");
    }
    if name.starts_with('/') {
        return bad("it must be relative");
    }
    for part in name.split('/') {
        if part.is_empty() {
            return bad("it has an empty path component");
        }
        if part.starts_with('.') {
            return bad("a path component starts with '.': trace_processor ignores such members");
        }
    }
    if container == Container::Tar && name.len() > tar::MAX_NAME {
        return bad("it is longer than 99 bytes, the longest TAR name trace_processor reads reliably; shorten it or write a ZIP");
    }
    if container == Container::Zip && name.len() > u16::MAX as usize {
        return bad("it is longer than a ZIP name can be");
    }
    Ok(())
}

/// What a member may be.
fn check_member_kind(m: &Member, kind: &MemberKind) -> Result<(), ArchiveError> {
    if m.has_overrides() && kind.is_container() {
        return Err(ArchiveError::OverrideOnContainer {
            path: m.name.clone(),
            kind: kind.describe(),
        });
    }
    check_kind(&m.name, kind)
}

pub(super) fn check_kind(name: &str, kind: &MemberKind) -> Result<(), ArchiveError> {
    match kind {
        MemberKind::Empty => Err(ArchiveError::EmptyMember(name.to_owned())),
        MemberKind::UndetectableJson => Err(ArchiveError::UndetectableMember(name.to_owned())),
        MemberKind::Unrecognized => Err(ArchiveError::UnrecognizedMember(name.to_owned())),
        MemberKind::Manifest => Err(ArchiveError::MultipleManifests {
            member: name.to_owned(),
        }),
        MemberKind::Gzip {
            holds_manifest: true,
        } => Err(ArchiveError::ManifestNotFirst {
            member: name.to_owned(),
        }),
        MemberKind::Zip => Err(ArchiveError::NestedArchive {
            member: name.to_owned(),
            kind: "ZIP",
        }),
        MemberKind::Tar => Err(ArchiveError::NestedArchive {
            member: name.to_owned(),
            kind: "TAR",
        }),
        _ => Ok(()),
    }
}
