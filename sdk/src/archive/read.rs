//! Reading archives back: their members, and the rules checked on them.

use super::{check_kind, sniff, tar, zip, ArchiveError, Manifest, MemberInfo, MemberKind};

/// The file members of a ZIP, TAR or gzipped TAR archive, in order.
///
/// # Errors
///
/// [`ArchiveError::NotAnArchive`], or [`ArchiveError::Corrupt`] for a damaged
/// archive (bad checksums, CRCs, truncation).
pub fn read_members(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    match sniff(bytes) {
        MemberKind::Zip => zip::read(bytes),
        MemberKind::Tar => tar::read(bytes),
        MemberKind::Gzip { .. } => {
            let inner = sniff::gunzip_members(bytes, u64::MAX).concat();
            if inner.len() >= 262 && &inner[257..262] == b"ustar" {
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
/// after a trace, valid per the spec against the members present; no empty,
/// undetectable or nested members.
///
/// # Errors
///
/// The first [`ArchiveError`] found.
pub fn check_archive(bytes: &[u8]) -> Result<ArchiveReport, ArchiveError> {
    let members = match read_members(bytes) {
        Ok(m) => m,
        Err(ArchiveError::NotAnArchive(_)) if matches!(sniff(bytes), MemberKind::Gzip { .. }) => {
            // A concatenated gzip stream: the manifest may only be first.
            let parts = sniff::gunzip_members(bytes, u64::MAX);
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
    for (name, data) in members {
        if name.split('/').any(|p| p.starts_with('.')) {
            report.ignored.push(name);
            continue;
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
