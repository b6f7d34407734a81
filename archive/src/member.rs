//! One member of an archive being written: its bytes and manifest settings.

use super::{ArchiveError, Clock, ClockSample};
use std::borrow::Cow;
use std::path::PathBuf;

/// Where a member's bytes come from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    Path(PathBuf),
    Bytes(Vec<u8>),
}

/// Which clock `sync_to.clock` names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum RefClock {
    /// BOOTTIME when the reference has clocks, else its own timeline.
    #[default]
    Auto,
    Named(Clock),
    /// The reference's own per-file timeline (`sync_to.clock` absent).
    Private,
}

#[derive(Debug, Clone, Default)]
pub(super) struct SyncSpec {
    pub(super) file: Option<String>,
    pub(super) machine: Option<String>,
    pub(super) clock: RefClock,
}

#[derive(Debug, Clone, Default)]
pub(super) struct ClockSpec {
    pub(super) clock: Option<Clock>,
    pub(super) machine: Option<String>,
    pub(super) sync_to: Option<SyncSpec>,
    pub(super) offset_ns: Option<i64>,
}

/// One file of an [`Archive`](super::Archive), with its manifest settings. Returned by
/// [`Archive::add_file`](super::Archive::add_file), [`Archive::add_bytes`](super::Archive::add_bytes) and [`Archive::file`](super::Archive::file); every
/// setter returns `&mut Self` for chaining.
#[derive(Debug, Clone)]
pub struct Member {
    pub(super) name: String,
    source: Source,
    pub(super) machine: Option<String>,
    pub(super) machines: Option<Vec<(i64, String)>>,
    pub(super) clocks: Option<ClockSpec>,
    pub(super) sample: Option<ClockSample>,
    pub(super) foreign: bool,
    /// The machine it was recorded on as its sidecar says (host, boot id),
    /// if it has one: members of one machine may be joined
    /// ([`Archive::join_processes`](super::Archive::join_processes)).
    pub(super) recorded_on: Option<(String, Option<String>)>,
}

impl Member {
    pub(super) fn new(name: String, source: Source) -> Member {
        Member {
            name,
            source,
            machine: None,
            machines: None,
            clocks: None,
            sample: None,
            foreign: false,
            recorded_on: None,
        }
    }

    /// The member name (its path inside the archive).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Attributes the whole file to the machine `name` (`machine.name`).
    /// Files with the same machine name share one machine in the merged trace.
    pub fn machine(&mut self, name: impl Into<String>) -> &mut Self {
        self.machine = Some(name.into());
        self
    }

    /// Names the machines embedded in a multi-machine trace (`machines`):
    /// `(id, name)` pairs; id 0 is the file's base machine. Every machine id
    /// carried by the file's packets must be declared.
    pub fn machines<I, S>(&mut self, ids: I) -> &mut Self
    where
        I: IntoIterator<Item = (i64, S)>,
        S: Into<String>,
    {
        self.machines = Some(ids.into_iter().map(|(id, n)| (id, n.into())).collect());
        self
    }

    fn clocks_mut(&mut self) -> &mut ClockSpec {
        self.clocks.get_or_insert_with(ClockSpec::default)
    }

    /// Places this file against `file` (a member name): `Some(clock)` relates
    /// this file's `clock` to `file`'s `clock` (RELATE); `None` pins this
    /// clockless file to `file` (PIN). See the [crate docs](crate).
    pub fn sync_to(&mut self, file: impl Into<String>, clock: Option<Clock>) -> &mut Self {
        let c = self.clocks_mut();
        c.clock = clock;
        let sync = c.sync_to.get_or_insert_with(SyncSpec::default);
        sync.file = Some(file.into());
        sync.clock = clock.map_or(RefClock::Auto, RefClock::Named);
        self
    }

    /// Sets `sync_to.clock` explicitly: `Some(clock)` names the reference
    /// clock, `None` the reference's own per-file timeline.
    pub fn reference_clock(&mut self, clock: Option<Clock>) -> &mut Self {
        let sync = self
            .clocks_mut()
            .sync_to
            .get_or_insert_with(SyncSpec::default);
        sync.clock = clock.map_or(RefClock::Private, RefClock::Named);
        self
    }

    /// `sync_to.machine`: which machine of a multi-machine reference.
    pub fn sync_to_machine(&mut self, machine: impl Into<String>) -> &mut Self {
        self.clocks_mut()
            .sync_to
            .get_or_insert_with(SyncSpec::default)
            .machine = Some(machine.into());
        self
    }

    /// `clocks.machine`: which of this multi-machine file's machines owns the
    /// related clock.
    pub fn clock_machine(&mut self, machine: impl Into<String>) -> &mut Self {
        self.clocks_mut().machine = Some(machine.into());
        self
    }

    /// `offset_ns`: this file's clock reads T when the reference reads
    /// T + `ns` (positive: this file moves later). Without it ringtrace
    /// computes the offset (see the [crate docs](crate)).
    pub fn offset_ns(&mut self, ns: i64) -> &mut Self {
        self.clocks_mut().offset_ns = Some(ns);
        self
    }

    /// A reading of the clocks of the machine this file was recorded on,
    /// for computing offsets across machines.
    pub fn clock_sample(&mut self, sample: ClockSample) -> &mut Self {
        self.sample = Some(sample);
        self
    }

    /// This file was recorded on this machine (since its last boot): takes a
    /// [`ClockSample::now`].
    pub fn recorded_here(&mut self) -> &mut Self {
        self.clock_sample(ClockSample::now())
    }

    /// Not written by ringtrace: a JSON file's timestamps are not assumed to
    /// be BOOTTIME, so it is not pinned automatically and offsets against its
    /// own timeline are not computed.
    pub fn foreign(&mut self) -> &mut Self {
        self.foreign = true;
        self
    }

    pub(super) fn has_overrides(&self) -> bool {
        self.machine.is_some() || self.machines.is_some() || self.clocks.is_some()
    }

    pub(super) fn load(&self) -> Result<Cow<'_, [u8]>, ArchiveError> {
        match &self.source {
            Source::Bytes(b) => Ok(Cow::Borrowed(b)),
            Source::Path(p) => std::fs::read(p)
                .map(Cow::Owned)
                .map_err(|e| ArchiveError::io(Some(p), e)),
        }
    }
}
