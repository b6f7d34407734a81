//! Reading archives back: their members, and the rules checked on them.

use super::write::check_kind;
use super::{sniff, tar, zip, ArchiveError, Manifest, MemberInfo, MemberKind};

/// How many bytes [`read_members`] and [`check_archive`] decompress at most
/// (deflated ZIP members, gzip streams, all together; 1 GiB), so that a small
/// archive cannot claim memory far beyond its size ("zip bomb"). TAR and
/// stored ZIP members do not count: they are copies of the input. The
/// `_limited` variants take another limit.
pub const DEFAULT_UNPACK_LIMIT: u64 = 1 << 30;

/// The file members of a ZIP, TAR or gzipped TAR archive, in order.
///
/// # Errors
///
/// [`ArchiveError::NotAnArchive`], [`ArchiveError::Corrupt`] for a damaged
/// archive (bad checksums, CRCs, truncation), [`ArchiveError::UnpackLimit`]
/// past [`DEFAULT_UNPACK_LIMIT`].
pub fn read_members(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    read_members_limited(bytes, DEFAULT_UNPACK_LIMIT)
}

/// [`read_members`], decompressing at most `limit` bytes.
///
/// # Errors
///
/// As [`read_members`].
pub fn read_members_limited(
    bytes: &[u8],
    limit: u64,
) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    match sniff(bytes) {
        MemberKind::Zip => zip::read(bytes, limit),
        MemberKind::Tar => tar::read(bytes),
        MemberKind::Gzip { .. } => {
            let inner = sniff::gunzip_members(bytes, limit)
                .map_err(|()| ArchiveError::UnpackLimit {
                    member: "(gzip stream)".into(),
                    limit,
                })?
                .concat();
            if sniff(&inner) == MemberKind::Tar {
                tar::read(&inner)
            } else {
                Err(ArchiveError::NotAnArchive(
                    "a gzip stream that is not a TAR".into(),
                ))
            }
        }
        k => Err(ArchiveError::NotAnArchive(format!(
            "the data is {}",
            k.describe()
        ))),
    }
}

/// What [`check_archive`] found.
#[derive(Debug, Clone)]
pub struct ArchiveReport {
    /// The trace members (not the manifest, not ignored members).
    pub members: Vec<MemberInfo>,
    /// Members trace_processor ignores (a path component starts with `.`).
    pub ignored: Vec<String>,
    /// The manifest's member name and content, if there is one.
    pub manifest: Option<(String, Manifest)>,
}

/// Reads an archive (or a concatenated gzip stream) and applies the rules
/// [`Archive`](super::Archive) applies when writing: one manifest at most, never gzipped nor
/// after a trace, valid per the spec against the members present; unique
/// member names; no empty, undetectable, unrecognized or nested members.
///
/// # Errors
///
/// The first [`ArchiveError`] found.
pub fn check_archive(bytes: &[u8]) -> Result<ArchiveReport, ArchiveError> {
    check_archive_limited(bytes, DEFAULT_UNPACK_LIMIT)
}

/// [`check_archive`], decompressing at most `limit` bytes (see
/// [`DEFAULT_UNPACK_LIMIT`]).
///
/// # Errors
///
/// As [`check_archive`].
pub fn check_archive_limited(bytes: &[u8], limit: u64) -> Result<ArchiveReport, ArchiveError> {
    let members = match read_members_limited(bytes, limit) {
        Ok(m) => m,
        Err(ArchiveError::NotAnArchive(_)) if matches!(sniff(bytes), MemberKind::Gzip { .. }) => {
            // A concatenated gzip stream: the manifest may only be first.
            let parts =
                sniff::gunzip_members(bytes, limit).map_err(|()| ArchiveError::UnpackLimit {
                    member: "(gzip stream)".into(),
                    limit,
                })?;
            for (i, p) in parts.iter().enumerate().skip(1) {
                if sniff::is_manifest(p) {
                    return Err(ArchiveError::ManifestNotFirst {
                        member: format!("gzip member {i}"),
                    });
                }
            }
            parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| (format!("gzip member {i}"), p))
                .collect()
        }
        Err(e) => return Err(e),
    };
    let mut report = ArchiveReport {
        members: Vec::new(),
        ignored: Vec::new(),
        manifest: None,
    };
    let mut manifest_text = None;
    let mut names = std::collections::HashSet::new();
    for (name, data) in members {
        if name.split('/').any(|p| p.starts_with('.')) {
            report.ignored.push(name);
            continue;
        }
        if !names.insert(name.clone()) {
            return Err(ArchiveError::DuplicateMember(name));
        }
        let kind = sniff(&data);
        if kind == MemberKind::Manifest {
            if manifest_text.is_some() {
                return Err(ArchiveError::MultipleManifests { member: name });
            }
            manifest_text = Some((name, String::from_utf8_lossy(&data).into_owned()));
            continue;
        }
        check_kind(&name, &kind)?;
        report.members.push(MemberInfo {
            name,
            kind,
            len: data.len() as u64,
        });
    }
    if let Some((name, text)) = manifest_text {
        let m = Manifest::from_json(&text)?;
        m.validate(&report.members)?;
        report.manifest = Some((name, m));
    }
    Ok(report)
}
