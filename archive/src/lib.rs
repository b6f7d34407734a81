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
//! The crate root holds [`Archive`] and its settings; `write` checks and
//! writes it, `plan` builds its final manifest (automatic pins, computed
//! offsets); `member` is one file of it, `read` reads archives back and
//! checks them; `manifest` parses, builds and validates the manifest;
//! `clock` reads our own files' clock snapshots;
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
mod join;
mod manifest;
mod member;
mod plan;
mod read;
mod sniff;
mod sys;
mod tar;
pub mod varint;
mod write;
mod zip;

pub use clock::{Clock, ClockSample};
pub use dir::MemberFile;
pub use error::ArchiveError;
pub use join::join_perfetto;
pub use manifest::{AttrValue, Clocks, FileEntry, Manifest, MemberInfo, SyncTo, TraceTime};
pub use member::Member;
use member::Source;
pub use read::{
    check_archive, check_archive_limited, read_members, read_members_limited, ArchiveReport,
    DEFAULT_UNPACK_LIMIT,
};
pub use sniff::{sniff, MemberKind, ProtoInfo};
pub use zip::ZipMethod;

use std::io::Write;
use std::path::Path;
use write::{write_atomically, Container};

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

    /// Joins the Perfetto members recorded on one machine into one member
    /// `name`, so that Perfetto links what crosses between them: a flow
    /// from one process's slice to another's (trace processor matches
    /// flows within a file, never across the files of an archive; see
    /// [`join_perfetto`]). The members joined are the Perfetto protobuf
    /// traces without manifest settings (no machine, no clocks, not the
    /// reference of another member or of the trace time) and of a single
    /// machine: every one's sidecar ([`MemberFile::prepare`]) names
    /// the same host and boot, or `one_machine` says they are (the caller
    /// knows). Returns their names, in the order joined (the members'
    /// order); none when fewer than two qualify or their sidecars name
    /// several machines (or some have none) and `one_machine` is false.
    /// The joined member takes the place of the first of them.
    ///
    /// # Errors
    ///
    /// [`ArchiveError::DuplicateMember`] if another member is named
    /// `name`; [`ArchiveError::CannotJoin`] if one cannot be joined (packets
    /// of another machine, compressed packets, a packet that does not
    /// parse); [`ArchiveError::Io`] if a member's file cannot be read.
    pub fn join_processes(
        &mut self,
        name: &str,
        one_machine: bool,
    ) -> Result<Vec<String>, ArchiveError> {
        // Members another one's settings name stay as they are.
        let mut named: std::collections::BTreeSet<&str> = self
            .members
            .iter()
            .filter_map(|m| m.clocks.as_ref()?.sync_to.as_ref()?.file.as_deref())
            .collect();
        named.extend(self.trace_time.as_ref().and_then(|t| t.file.as_deref()));
        let mut picked = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            if m.has_overrides() || m.foreign || named.contains(m.name.as_str()) {
                continue;
            }
            let bytes = m.load()?;
            if let MemberKind::Perfetto(info) = sniff(&bytes) {
                if info.machine_ids.is_empty() {
                    picked.push(i);
                }
            }
        }
        let machines: std::collections::BTreeSet<_> = picked
            .iter()
            .map(|&i| self.members[i].recorded_on.clone())
            .collect();
        let one = one_machine || (machines.len() == 1 && !machines.contains(&None));
        if picked.len() < 2 || !one {
            return Ok(Vec::new());
        }
        if self.members.iter().any(|m| m.name == name) {
            return Err(ArchiveError::DuplicateMember(name.to_owned()));
        }
        let loaded = picked
            .iter()
            .map(|&i| {
                Ok((
                    self.members[i].name.clone(),
                    self.members[i].load()?.into_owned(),
                ))
            })
            .collect::<Result<Vec<_>, ArchiveError>>()?;
        let traces: Vec<(&str, &[u8])> = loaded
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        let joined = join_perfetto(&traces)?;
        let first = picked[0];
        let mut member = Member::new(name.to_owned(), Source::Bytes(joined));
        member.recorded_on = self.members[first].recorded_on.clone();
        self.members[first] = member;
        for &i in picked[1..].iter().rev() {
            self.members.remove(i);
        }
        Ok(loaded.into_iter().map(|(n, _)| n).collect())
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
}

// The README's code, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
