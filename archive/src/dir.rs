//! Several processes, one archive: each process writes its trace into a
//! shared directory (at a [`MemberFile`]'s path), the collector packs the
//! directory ([`Archive::from_dir`](super::Archive::from_dir)).
//!
//! Beside each trace `<role>.<pid>.<ext>`, [`MemberFile::prepare`] writes a
//! hidden sidecar `.<role>.<pid>.<ext>.ringtrace.json` (hidden: a dot-file is
//! never packed, and trace_processor ignores dot-files anyway):
//!
//! ```json
//! {"ringtrace_member": 1, "member": "server.4242.pftrace", "role": "server", "pid": 4242,
//!  "host": "build-7", "boot_id": "4f0c...",
//!  "clock": {"boottime_ns": 1, "realtime_ns": 2, "monotonic_ns": 3}}
//! ```
//!
//! The clock sample lets a JSON member be placed against a Perfetto member
//! of another machine; host and boot id tell which members share a machine
//! (one boot of one host has one BOOTTIME).

use super::clock::ClockSample;
use super::{Archive, ArchiveError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SIDECAR_SUFFIX: &str = ".ringtrace.json";

/// This process's trace file in a directory shared by several processes:
/// `<dir>/<role>.<pid>.<ext>`. `role` is reduced to ASCII letters, digits,
/// `-` and `_`, at most 64 bytes, so the name is a valid archive member.
///
/// The SDK's `ringtrace::archive::member_builder` starts a session writing
/// there; any other writer can use [`path`](Self::path) the same way.
///
/// # Examples
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("ringtrace-doc-member-{}", std::process::id()));
/// let file = ringtrace_archive::MemberFile::new(&dir, "web worker", "json");
/// assert_eq!(file.role, "web_worker");
/// assert_eq!(file.path, dir.join(format!("web_worker.{}.json", std::process::id())));
/// file.prepare()?; // the sidecar: host, boot id, a clock sample
/// std::fs::write(&file.path, br#"[{"name":"a","ph":"i","s":"t","ts":1,"pid":1,"tid":1}]"#)?;
/// let archive = ringtrace_archive::Archive::from_dir(&dir)?;
/// assert_eq!(archive.members().len(), 1);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFile {
    /// `<dir>/<role>.<pid>.<ext>`.
    pub path: PathBuf,
    /// The role as written in the file name (and the sidecar).
    pub role: String,
}

impl MemberFile {
    /// The member file of this process (by its pid) for `role` in `dir`,
    /// with extension `ext` (`"pftrace"`, `"json"`). Touches no file.
    pub fn new(dir: impl AsRef<Path>, role: &str, ext: &str) -> MemberFile {
        let role = clean_role(role);
        let path = dir
            .as_ref()
            .join(format!("{role}.{}.{ext}", std::process::id()));
        MemberFile { path, role }
    }

    /// Creates the directory and writes the hidden sidecar beside
    /// [`path`](Self::path) (host, boot id, a clock sample of now), which
    /// [`Archive::from_dir`] reads to relate this file to the others.
    ///
    /// # Errors
    ///
    /// [`ArchiveError::Io`] if the directory or the sidecar cannot be written.
    pub fn prepare(&self) -> Result<(), ArchiveError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::io(Some(dir), e))?;
        let member = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let s = ClockSample::now();
        let q = super::manifest::quote;
        let text = format!(
            "{{\"ringtrace_member\": 1, \"member\": {}, \"role\": {}, \"pid\": {}, \"host\": {}, \"boot_id\": {}, \
             \"clock\": {{\"boottime_ns\": {}, \"realtime_ns\": {}, \"monotonic_ns\": {}}}}}\n",
            q(&member),
            q(&self.role),
            std::process::id(),
            q(&host_name()),
            boot_id().map_or("null".to_owned(), |b| q(&b)),
            s.boottime_ns,
            s.realtime_ns,
            s.monotonic_ns.unwrap_or(0),
        );
        let sidecar = dir.join(format!(".{member}{SIDECAR_SUFFIX}"));
        std::fs::write(&sidecar, text).map_err(|e| ArchiveError::io(Some(&sidecar), e))
    }
}

fn clean_role(role: &str) -> String {
    let mut s: String = role
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        s.push_str("process");
    }
    s
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn host_name() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| read_trimmed("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "host".to_owned())
}

fn boot_id() -> Option<String> {
    read_trimmed("/proc/sys/kernel/random/boot_id")
}

struct Sidecar {
    host: String,
    boot_id: Option<String>,
    sample: Option<ClockSample>,
}

fn read_sidecar(path: &Path) -> Option<Sidecar> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v.get("ringtrace_member")?;
    let clock = v.get("clock");
    let num = |k: &str| clock.and_then(|c| c.get(k)).and_then(Value::as_u64);
    let sample = match (num("boottime_ns"), num("realtime_ns")) {
        (Some(b), Some(r)) => Some(ClockSample {
            boottime_ns: b,
            realtime_ns: r,
            monotonic_ns: num("monotonic_ns").filter(|&m| m != 0),
        }),
        _ => None,
    };
    Some(Sidecar {
        host: v
            .get("host")
            .and_then(Value::as_str)
            .unwrap_or("host")
            .to_owned(),
        boot_id: v.get("boot_id").and_then(Value::as_str).map(str::to_owned),
        sample,
    })
}

pub(super) fn add_dir(archive: &mut Archive, dir: &Path) -> Result<(), ArchiveError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| ArchiveError::io(Some(dir), e))? {
        let entry = entry.map_err(|e| ArchiveError::io(Some(dir), e))?;
        let is_file = entry
            .file_type()
            .map_err(|e| ArchiveError::io(Some(&entry.path()), e))?
            .is_file();
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if is_file && !name.starts_with('.') && !name.contains(".partial-") {
            names.push(name.to_owned());
        }
    }
    names.sort();
    let sidecars: Vec<Option<Sidecar>> = names
        .iter()
        .map(|n| read_sidecar(&dir.join(format!(".{n}{SIDECAR_SUFFIX}"))))
        .collect();
    // One machine per (host, boot id); name them only when there are several.
    let mut machines: BTreeMap<(String, Option<String>), ()> = BTreeMap::new();
    for s in sidecars.iter().flatten() {
        machines.insert((s.host.clone(), s.boot_id.clone()), ());
    }
    let several = machines.len() > 1;
    let hosts_unique = {
        let mut hosts: Vec<&String> = machines.keys().map(|(h, _)| h).collect();
        hosts.dedup();
        hosts.len() == machines.len()
    };
    for (name, sidecar) in names.iter().zip(sidecars) {
        let m = archive.add_file(dir.join(name))?;
        let Some(s) = sidecar else { continue };
        m.recorded_on = Some((s.host.clone(), s.boot_id.clone()));
        if let Some(sample) = s.sample {
            m.clock_sample(sample);
        }
        if several {
            let machine = match (&s.boot_id, hosts_unique) {
                (Some(b), false) => format!("{}-{}", s.host, b.chars().take(8).collect::<String>()),
                _ => s.host.clone(),
            };
            m.machine(machine);
        }
    }
    Ok(())
}
