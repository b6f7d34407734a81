//! The final manifest of an [`Archive`]: the members' clock settings,
//! the automatic pins and the offsets ringtrace computes.

use super::member::{ClockSpec, RefClock, SyncSpec};
use super::{
    clock, Archive, ArchiveError, Clock, ClockSample, Clocks, FileEntry, Manifest, MemberInfo,
    MemberKind, SyncTo,
};

impl Archive {
    /// The final manifest: the members' settings, automatic pins and
    /// computed offsets; validated.
    pub(super) fn plan(&self, infos: &[MemberInfo]) -> Result<Manifest, ArchiveError> {
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
