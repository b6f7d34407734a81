//! Multi-file traces: one TAR or ZIP archive holding several trace files and
//! a `perfetto_manifest` that tells Perfetto which machine each file belongs
//! to and how their clocks relate, so the merged view opens in
//! <https://ui.perfetto.dev> or trace_processor with zero configuration.
//!
//! # Building an archive
//!
//! ```
//! use ringtrace_archive::{Archive, Clock};
//! # let dir = std::env::temp_dir().join(format!("ringtrace-doc-archive-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let client = dir.join("client.pftrace");
//! # std::fs::write(&client, doc_trace())?;
//! # fn doc_trace() -> Vec<u8> {
//! #     // A Perfetto trace with one global clock snapshot, as ringtrace writes.
//! #     use prost::Message;
//! #     use ringtrace_protos::{clock_snapshot::Clock, ClockSnapshot, Trace, TracePacket};
//! #     let clock = |id, ts| Clock { clock_id: Some(id), timestamp: Some(ts), ..Default::default() };
//! #     let snapshot = ClockSnapshot { clocks: vec![clock(6, 1_000), clock(1, 5_000), clock(3, 900)], primary_trace_clock: None };
//! #     let packet = TracePacket { trusted_packet_sequence_id: Some(1), clock_snapshot: Some(snapshot), ..Default::default() };
//! #     Trace { packet: vec![packet] }.encode_to_vec()
//! # }
//! let mut archive = Archive::new();
//! archive.add_file(&client)?.machine("laptop");
//! // A Chrome JSON trace from elsewhere, 250 µs late against the laptop's BOOTTIME:
//! archive
//!     .add_bytes("app.json", br#"[{"name":"a","ph":"i","s":"t","ts":1,"pid":1,"tid":1}]"#.to_vec())
//!     .foreign()
//!     .sync_to("client.pftrace", None) // PIN: app.json has no clocks of its own
//!     .offset_ns(250_000);
//! archive.trace_time(Clock::Boottime, Some("client.pftrace"), None);
//! archive.attribute("run_id", 42);
//! archive.write_tar(dir.join("run.tar"))?;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every member is listed in the manifest's `files` (path = member name).
//! The manifest is written first, named `perfetto_manifest.json`, and starts
//! with the bytes `{"perfetto_manifest"` (trace_processor detects it by that
//! prefix, whatever its position in the archive).
//!
//! # RELATE and PIN
//!
//! [`Member::sync_to`]`(file, Some(clock))` *relates*: this file keeps its own
//! clocks and the manifest adds one edge, "this file's `clock` reads T when
//! `file`'s `clock` reads T + offset" (`clocks.clock` and `sync_to.clock` are
//! both `clock`). Use it for files with clock snapshots (Perfetto).
//!
//! [`Member::sync_to`]`(file, None)` *pins*: this file is clockless, its
//! events sit on its own per-file timeline, which is placed on the reference
//! (`clocks.clock` absent). The reference clock is BOOTTIME when the
//! reference carries clocks and the reference's own timeline when it is
//! clockless; [`Member::reference_clock`] overrides that. Use it for Chrome
//! JSON. Pinning a file that has clock snapshots is an error.
//!
//! # Offsets ringtrace computes
//!
//! When [`Member::offset_ns`] is not given, ringtrace computes it from what the
//! files recorded:
//!
//! - ringtrace's JSON `ts` are BOOTTIME microseconds, so a JSON file pinned
//!   to BOOTTIME of a file of the *same machine* (same machine name, or both
//!   unnamed) gets offset 0, with no clock reading needed;
//! - across machines, ringtrace relates each machine's clocks through
//!   REALTIME, which NTP keeps in step: a clock `K` of machine `m` reads
//!   `R - e(m, K)` when REALTIME reads `R` everywhere, with
//!   `e(m, K) = REALTIME - K` from one simultaneous reading of `m`'s clocks
//!   (a [`ClockSample`]). As the source reads `T` when the reference reads
//!   `T + offset_ns`, `offset_ns = e(source machine, K_src) - e(reference
//!   machine, K_ref)`.
//!
//! A machine's sample comes from any of its files: a Perfetto file's first
//! global clock snapshot (BOOTTIME, MONOTONIC, REALTIME), a sample given with
//! [`Member::clock_sample`] / [`Member::recorded_here`], or the one
//! [`MemberFile::prepare`] writes beside each trace.
//!
//! With [`Archive::auto_clocks`] on (the default), each ringtrace JSON member
//! without a `clocks` override is pinned for you: to BOOTTIME of a Perfetto
//! member of its machine (else of any machine, through REALTIME), or, when
//! the archive has no Perfetto member, to the first JSON member. Mark JSON
//! files ringtrace did not write with [`Member::foreign`]: their time base is
//! unknown, so they are left alone.
//!
//! # Validation
//!
//! [`Archive::write_tar`] and [`Archive::write_zip`] check everything before
//! writing a byte, and fail with an [`ArchiveError`] instead of writing an
//! archive trace_processor would reject: every condition of the manifest
//! spec's error table, the container rules (member names without
//! dot-components, unique, at most 99 bytes in a TAR; no empty or
//! undetectable members, and none that no Perfetto reader recognizes as a
//! trace, unless [`Archive::allow_unrecognized`]; no nested archives; no
//! second manifest, gzipped or not), and the clock rules above.
//! [`check_archive`] applies the same rules to an existing archive.
//!
//! Reading an archive is safe on any bytes: damage is an
//! [`ArchiveError::Corrupt`], never a panic, and what is decompressed (ZIP
//! deflate, gzip, compressed packets) stops at [`DEFAULT_UNPACK_LIMIT`] (or
//! the limit given to [`read_members_limited`] / [`check_archive_limited`]),
//! whatever sizes the headers claim. `cli/tests/fuzz` holds every reader to
//! that.
//!
//! # Several processes, one archive
//!
//! Each process writes its own trace into a shared directory at its
//! [`MemberFile`] (file `<dir>/<role>.<pid>.pftrace` or `.json`, plus a
//! hidden sidecar recording the host, boot id and a clock sample); when they
//! are done, [`Archive::from_dir`] collects them. Files from different boots
//! or hosts get machine names of their own.
//!
//! ```no_run
//! // In each child process:
//! let dir = std::env::var("TRACE_DIR").unwrap();
//! let file = ringtrace_archive::MemberFile::new(&dir, "worker", "pftrace");
//! file.prepare()?;
//! // ... record the trace into `file.path` (with ringtrace:
//! // `ringtrace::archive::member_builder` does both steps) ...
//! // In the parent, after the children exited:
//! ringtrace_archive::Archive::from_dir(&dir)?.write_tar("run.tar")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Members are read into memory while the archive is written.
//!
//! # The modules
//!
//! The crate root writes archives ([`Archive`]); `member` is one file of it,
//! `read` reads archives back and checks them; `manifest` parses, builds and
//! validates the manifest; `clock` reads our own files' clock snapshots;
//! `sniff` tells what a member is; `tar` and `zip` are the containers; `dir`
//! the per-process member files ([`MemberFile`]); `sys` reads the machine's
//! clocks.
//!
//! Rules of this crate: it works on finished files and bytes only and knows
//! nothing of the SDK that records them (no ring, no encoder, no session);
//! the SDK re-exports it as `ringtrace::archive` and adds the one function
//! that starts a session (`member_builder`). Only `sys` holds `unsafe`
//! (reading the clocks).

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod clock;
mod dir;
mod error;
mod manifest;
mod member;
mod read;
mod sniff;
mod sys;
mod tar;
mod zip;

pub use clock::{Clock, ClockSample};
pub use dir::MemberFile;
pub use error::ArchiveError;
pub use manifest::{AttrValue, Clocks, FileEntry, Manifest, MemberInfo, SyncTo, TraceTime};
pub use member::Member;
use member::{ClockSpec, RefClock, Source, SyncSpec};
pub use read::{
    check_archive, check_archive_limited, read_members, read_members_limited, ArchiveReport,
    DEFAULT_UNPACK_LIMIT,
};
pub use sniff::{sniff, MemberKind, ProtoInfo};
pub use zip::ZipMethod;

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The manifest's member name.
pub const MANIFEST_NAME: &str = "perfetto_manifest.json";

/// A set of trace files and the manifest that ties them together; written as
/// a TAR or ZIP. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Archive {
    members: Vec<Member>,
    trace_time: Option<TraceTime>,
    attributes: Vec<(String, AttrValue)>,
    auto_clocks: bool,
    zip_method: ZipMethod,
    mtime: Option<u64>,
    allow_unrecognized: bool,
}

impl Default for Archive {
    fn default() -> Self {
        Archive::new()
    }
}

/// An archive ready to write: the final manifest and every member's bytes.
struct Prepared<'a> {
    manifest: Manifest,
    data: Vec<Cow<'a, [u8]>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Tar,
    Zip,
    Any,
}

impl Archive {
    /// An empty archive: automatic clocks on, ZIP members deflated.
    pub fn new() -> Archive {
        Archive {
            members: Vec::new(),
            trace_time: None,
            attributes: Vec::new(),
            auto_clocks: true,
            zip_method: ZipMethod::Deflate,
            mtime: None,
            allow_unrecognized: false,
        }
    }

    /// An archive of every trace file in `dir` (see [`Archive::add_dir`]).
    ///
    /// # Errors
    ///
    /// [`ArchiveError::Io`] if the directory cannot be listed.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Archive, ArchiveError> {
        let mut a = Archive::new();
        a.add_dir(dir)?;
        Ok(a)
    }

    /// Adds every regular file of `dir` whose name does not start with `.`,
    /// in name order, named by its file name; applies the sidecars written by
    /// [`MemberFile::prepare`] (which the SDK's
    /// `member_builder` calls): clock samples, and machine names when the files come
    /// from more than one boot or host (named after the host).
    ///
    /// # Errors
    ///
    /// [`ArchiveError::Io`] if the directory cannot be listed.
    pub fn add_dir(&mut self, dir: impl AsRef<Path>) -> Result<&mut Self, ArchiveError> {
        dir::add_dir(self, dir.as_ref())?;
        Ok(self)
    }

    /// Adds the file at `path`, named by its file name.
    ///
    /// # Errors
    ///
    /// [`ArchiveError::Io`] if it is not a readable file;
    /// [`ArchiveError::InvalidMemberName`] if it has no UTF-8 file name.
    pub fn add_file(&mut self, path: impl AsRef<Path>) -> Result<&mut Member, ArchiveError> {
        let path = path.as_ref();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| ArchiveError::InvalidMemberName {
                name: path.display().to_string(),
                reason: "a member name must be UTF-8; use add_file_as".into(),
            })?
            .to_owned();
        self.add_file_as(name, path)
    }

    /// Adds the file at `path` as member `name`.
    ///
    /// # Errors
    ///
    /// [`ArchiveError::Io`] if it is not a readable file.
    pub fn add_file_as(
        &mut self,
        name: impl Into<String>,
        path: impl AsRef<Path>,
    ) -> Result<&mut Member, ArchiveError> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| ArchiveError::io(Some(path), e))?;
        if !meta.is_file() {
            return Err(ArchiveError::io(
                Some(path),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        self.members
            .push(Member::new(name.into(), Source::Path(path.to_path_buf())));
        Ok(self.members.last_mut().unwrap())
    }

    /// Adds `bytes` as member `name`.
    pub fn add_bytes(&mut self, name: impl Into<String>, bytes: Vec<u8>) -> &mut Member {
        self.members
            .push(Member::new(name.into(), Source::Bytes(bytes)));
        self.members.last_mut().unwrap()
    }

    /// The member named `name`, to change its settings.
    ///
    /// # Errors
    ///
    /// [`ArchiveError::NoSuchMember`].
    pub fn file(&mut self, name: &str) -> Result<&mut Member, ArchiveError> {
        self.members
            .iter_mut()
            .find(|m| m.name == name)
            .ok_or_else(|| ArchiveError::NoSuchMember(name.to_owned()))
    }

    /// The members, in the order they were added (and are written).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// `trace_time`: the merged timeline's clock, of the machine of `file`
    /// (and for a multi-machine file, of its `machine`); the host machine's
    /// without `file`.
    pub fn trace_time(
        &mut self,
        clock: Clock,
        file: Option<&str>,
        machine: Option<&str>,
    ) -> &mut Self {
        self.trace_time = Some(TraceTime {
            clock,
            file: file.map(str::to_owned),
            machine: machine.map(str::to_owned),
        });
        self
    }

    /// Adds (or replaces) an attribute: a string or an integer, shown as the
    /// `metadata` row `manifest_attribute.<key>`.
    pub fn attribute(&mut self, key: impl Into<String>, value: impl Into<AttrValue>) -> &mut Self {
        let (key, value) = (key.into(), value.into());
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
        self
    }

    /// Whether ringtrace pins its JSON members by itself (default `true`).
    pub fn auto_clocks(&mut self, on: bool) -> &mut Self {
        self.auto_clocks = on;
        self
    }

    /// How ZIP members are stored (default deflate).
    pub fn zip_method(&mut self, method: ZipMethod) -> &mut Self {
        self.zip_method = method;
        self
    }

    /// Accepts members no Perfetto reader recognizes
    /// ([`MemberKind::Unrecognized`]; default `false`: they are an
    /// [`ArchiveError::UnrecognizedMember`]). For formats newer than the
    /// rules ringtrace knows; trace_processor refuses an archive with a member
    /// it cannot tell the type of.
    pub fn allow_unrecognized(&mut self, on: bool) -> &mut Self {
        self.allow_unrecognized = on;
        self
    }

    /// The modification time written for every member, in seconds since the
    /// epoch (default: now). Fix it for byte-identical archives.
    pub fn mtime(&mut self, secs: u64) -> &mut Self {
        self.mtime = Some(secs);
        self
    }

    /// The manifest that would be written, with computed offsets and
    /// automatic pins, after every check.
    ///
    /// # Errors
    ///
    /// See [`Archive::validate`].
    pub fn manifest(&self) -> Result<Manifest, ArchiveError> {
        Ok(self.prepare(Container::Any)?.manifest)
    }

    /// Checks the archive as [`Archive::write_zip`] would (TAR additionally
    /// limits member names to 99 bytes).
    ///
    /// # Errors
    ///
    /// The first [`ArchiveError`] found: unreadable members, bad member names,
    /// empty, undetectable, unrecognized or nested members, a second manifest, any violation
    /// of the manifest spec, an offset ringtrace cannot compute.
    pub fn validate(&self) -> Result<(), ArchiveError> {
        self.prepare(Container::Any).map(|_| ())
    }

    /// Writes a TAR archive at `path` (through a temporary file renamed into
    /// place: a failed write leaves no partial archive).
    ///
    /// # Errors
    ///
    /// See [`Archive::validate`]; [`ArchiveError::Io`] if writing fails.
    pub fn write_tar(&self, path: impl AsRef<Path>) -> Result<(), ArchiveError> {
        let prepared = self.prepare(Container::Tar)?;
        write_atomically(path.as_ref(), |w| self.emit_tar(&prepared, w))
    }

    /// Writes a TAR archive to `out`. Nothing is written if a check fails.
    ///
    /// # Errors
    ///
    /// See [`Archive::validate`]; [`ArchiveError::Io`] if writing fails.
    pub fn write_tar_to(&self, out: impl Write) -> Result<(), ArchiveError> {
        let prepared = self.prepare(Container::Tar)?;
        self.emit_tar(&prepared, out)
    }

    /// Writes a ZIP archive at `path` (through a temporary file).
    ///
    /// # Errors
    ///
    /// See [`Archive::validate`]; [`ArchiveError::TooLarge`] past 4 GiB;
    /// [`ArchiveError::Io`] if writing fails.
    pub fn write_zip(&self, path: impl AsRef<Path>) -> Result<(), ArchiveError> {
        let prepared = self.prepare(Container::Zip)?;
        write_atomically(path.as_ref(), |w| self.emit_zip(&prepared, w))
    }

    /// Writes a ZIP archive to `out`. Nothing is written if a check fails.
    ///
    /// # Errors
    ///
    /// As [`Archive::write_zip`].
    pub fn write_zip_to(&self, out: impl Write) -> Result<(), ArchiveError> {
        let prepared = self.prepare(Container::Zip)?;
        self.emit_zip(&prepared, out)
    }

    fn mtime_secs(&self) -> u64 {
        self.mtime.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
    }

    fn emit_tar(&self, p: &Prepared<'_>, out: impl Write) -> Result<(), ArchiveError> {
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

    fn emit_zip(&self, p: &Prepared<'_>, out: impl Write) -> Result<(), ArchiveError> {
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
    fn prepare(&self, container: Container) -> Result<Prepared<'_>, ArchiveError> {
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

    /// The final manifest: the members' settings, automatic pins and
    /// computed offsets; validated.
    fn plan(&self, infos: &[MemberInfo]) -> Result<Manifest, ArchiveError> {
        let specs = self.effective_clock_specs(infos);
        let files = self
            .members
            .iter()
            .map(|m| FileEntry {
                path: m.name.clone(),
                machine: m.machine.clone(),
                machines: m.machines.clone(),
                clocks: None,
            })
            .collect();
        let mut manifest = Manifest {
            version: Some(1),
            trace_time: self.trace_time.clone(),
            files,
            attributes: self.attributes.clone(),
        };
        let mut offset_failure = None;
        for (i, spec) in specs.iter().enumerate() {
            let Some(spec) = spec else { continue };
            let sync_to = spec.sync_to.as_ref().map(|s| SyncTo {
                file: s.file.clone(),
                machine: s.machine.clone(),
                clock: match s.clock {
                    RefClock::Named(c) => Some(c),
                    RefClock::Private => None,
                    RefClock::Auto => {
                        s.file
                            .as_deref()
                            .and_then(|f| self.index_of(f))
                            .and_then(|r| match &infos[r].kind {
                                MemberKind::Perfetto(p) if p.clock_snapshots > 0 => {
                                    Some(Clock::Boottime)
                                }
                                _ => None,
                            })
                    }
                },
            });
            let mut clocks = Clocks {
                clock: spec.clock,
                machine: spec.machine.clone(),
                sync_to,
                offset_ns: spec.offset_ns,
            };
            if clocks.offset_ns.is_none() {
                match self.compute_offset(i, &clocks, infos) {
                    Ok(off) => clocks.offset_ns = off,
                    Err(e) => {
                        offset_failure.get_or_insert(e);
                    }
                }
            }
            manifest.files[i].clocks = Some(clocks);
        }
        manifest.validate(infos)?;
        match offset_failure {
            Some(e) => Err(e),
            None => Ok(manifest),
        }
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|m| m.name == name)
    }

    fn is_ringtrace_json(&self, i: usize, infos: &[MemberInfo]) -> bool {
        infos[i].kind == MemberKind::Json && !self.members[i].foreign
    }

    /// Each member's clock settings, with the automatic pins added.
    fn effective_clock_specs(&self, infos: &[MemberInfo]) -> Vec<Option<ClockSpec>> {
        let mut specs: Vec<Option<ClockSpec>> =
            self.members.iter().map(|m| m.clocks.clone()).collect();
        if !self.auto_clocks {
            return specs;
        }
        let protos: Vec<usize> = (0..self.members.len())
            .filter(|&i| {
                self.members[i].machines.is_none()
                    && matches!(&infos[i].kind, MemberKind::Perfetto(p) if p.clock_snapshots > 0 && !p.is_multi_machine())
            })
            .collect();
        let jsons: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.is_ringtrace_json(i, infos) && specs[i].is_none())
            .collect();
        for &j in &jsons {
            let key = self.machine_key(j);
            let reference = if protos.is_empty() {
                // No Perfetto file: pin every JSON file to the first one.
                match jsons.first() {
                    Some(&anchor) if anchor != j => anchor,
                    _ => continue,
                }
            } else {
                protos
                    .iter()
                    .copied()
                    .find(|&p| self.machine_key(p) == key)
                    .or_else(|| {
                        self.sample_for(&key, j, infos)?;
                        protos
                            .iter()
                            .copied()
                            .find(|&p| self.sample_for(&self.machine_key(p), p, infos).is_some())
                    })
                    .unwrap_or(protos[0])
            };
            specs[j] = Some(ClockSpec {
                sync_to: Some(SyncSpec {
                    file: Some(self.members[reference].name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        specs
    }

    /// The machine a member's events are on, for clock purposes: its
    /// `machine`, or the name of its embedded id 0; `None` = the host.
    fn machine_key(&self, i: usize) -> Option<String> {
        let m = &self.members[i];
        m.machine.clone().or_else(|| {
            m.machines
                .iter()
                .flatten()
                .find(|(id, _)| *id == 0)
                .map(|(_, n)| n.clone())
        })
    }

    /// A clock sample of machine `key`: from member `prefer` first, then from
    /// any member on that machine.
    fn sample_for(
        &self,
        key: &Option<String>,
        prefer: usize,
        infos: &[MemberInfo],
    ) -> Option<ClockSample> {
        let order =
            std::iter::once(prefer).chain((0..self.members.len()).filter(move |&i| i != prefer));
        for i in order {
            let m = &self.members[i];
            let own = self.machine_key(i);
            if let Some(s) = m.sample {
                if own == *key {
                    return Some(s);
                }
            }
            if let MemberKind::Perfetto(p) = &infos[i].kind {
                for (&id, s) in &p.samples {
                    let name = match &m.machines {
                        Some(ms) => ms
                            .iter()
                            .find(|(d, _)| *d == id as i64)
                            .map(|(_, n)| Some(n.clone())),
                        None if id == 0 => Some(own.clone()),
                        None => None,
                    };
                    if name.as_ref() == Some(key) {
                        return Some(*s);
                    }
                }
            }
        }
        None
    }

    /// `offset_ns` for member `i`'s `clocks`, when ringtrace knows both time
    /// bases; `Ok(None)` when it does not (the manifest's default, 0).
    fn compute_offset(
        &self,
        i: usize,
        c: &Clocks,
        infos: &[MemberInfo],
    ) -> Result<Option<i64>, ArchiveError> {
        let Some(sync) = &c.sync_to else {
            return Ok(None);
        };
        let Some(r) = sync.file.as_deref().and_then(|f| self.index_of(f)) else {
            return Ok(None);
        };
        if r == i {
            return Ok(None);
        }
        let src_clock = match c.clock {
            Some(k) => k,
            None if self.is_ringtrace_json(i, infos) => Clock::Boottime,
            None => return Ok(None),
        };
        let ref_clock = match sync.clock {
            Some(k) => k,
            None if self.is_ringtrace_json(r, infos) => Clock::Boottime,
            None => return Ok(None),
        };
        let src_key = c.machine.clone().or_else(|| self.machine_key(i));
        let ref_key = sync.machine.clone().or_else(|| self.machine_key(r));
        if src_key == ref_key && src_clock == ref_clock {
            return Ok(Some(0));
        }
        let fail = |reason: String| ArchiveError::CannotComputeOffset {
            path: self.members[i].name.clone(),
            reference: self.members[r].name.clone(),
            reason,
        };
        let describe = |k: &Option<String>| {
            k.as_ref()
                .map_or("the host machine (no machine name)".to_owned(), |n| {
                    format!("machine '{n}'")
                })
        };
        let s_src = self.sample_for(&src_key, i, infos).ok_or_else(|| {
            fail(format!(
                "no clock reading of {} is known (no Perfetto file or clock sample of it)",
                describe(&src_key)
            ))
        })?;
        let s_ref = if src_key == ref_key {
            s_src
        } else {
            self.sample_for(&ref_key, r, infos).ok_or_else(|| {
                fail(format!(
                    "no clock reading of {} is known (no Perfetto file or clock sample of it)",
                    describe(&ref_key)
                ))
            })?
        };
        clock::offset_between(&s_src, src_clock, &s_ref, ref_clock)
            .map(Some)
            .map_err(fail)
    }
}

/// Creates `path` through a temporary sibling renamed into place.
fn write_atomically(
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

fn check_kind(name: &str, kind: &MemberKind) -> Result<(), ArchiveError> {
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

// The README's code, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
