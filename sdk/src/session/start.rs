//! The session's start, as named steps: the options checked, the memory
//! budget, the output opened, the outputs built (the session's own file and
//! what stands in front of it, system tracing's feed), the flusher and the
//! producer's threads spawned, then recording turned on.

use super::builder::{Builder, Format, Output};
use super::capture;
use super::control::Control;
use super::error::Error;
use super::file::sink::{Sink, Units};
use super::file::{self, File, Formats};
use super::file_output::FileOutput;
use super::flusher::{Env, Flusher};
use super::recorder::Recorder;
use super::window::Windows;
use super::{finish_at_exit, finish_current_session, Session, TraceGuard};
use super::{AT_EXIT, MIN_BUDGET_BYTES, NEXT_SESSION, SESSION};
use crate::encode::perfetto::PerfettoOptions;
use crate::encode::ProcessInfo;
use crate::output::Outputs;
use crate::record::callsite::{self, CategoryFilter};
use crate::record::clock::Calibration;
use crate::record::registry::{RingConfig, REGISTRY};
use crate::stats::counters;
use crate::system::feed::SystemFeed;
use crate::system::producer::Link;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The session's output as opened: its sink (none with system tracing
/// only), format and path (none for a writer).
struct Opened {
    sink: Option<Sink>,
    format: Format,
    path: Option<PathBuf>,
}

/// The memory a session may hold: the largest ring of a thread, and the
/// process-wide budget.
struct Memory {
    per_thread: usize,
    budget_bytes: u64,
}

impl Builder {
    /// Starts recording: creates the output (a file already at the path is
    /// truncated, which for a big one takes the file system some
    /// milliseconds), calibrates the clock (it spins 2 ms where events are
    /// stamped with the TSC), starts the flusher thread (and returns once
    /// that thread has written the trace's first bytes and waits for work,
    /// typically within a fraction of a millisecond, or after 250 ms at
    /// most: a writer that blocks does not hold `start` up) and replaces
    /// the process-wide category filter with this builder's. The session is
    /// process-global and records until the returned guard is dropped or
    /// [stopped](TraceGuard::stop); the trace is also finished at `exit`
    /// (including `std::process::exit` and the return from `main`).
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-start.json");
    /// let trace = ringtrace::builder().output(&path).start()?;
    /// assert!(ringtrace::is_recording());
    /// // A second session cannot start while this one records.
    /// assert!(matches!(
    ///     ringtrace::builder().output(&path).start(),
    ///     Err(ringtrace::Error::AlreadyStarted)
    /// ));
    /// trace.stop()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyStarted`] if a session is recording,
    /// [`Error::Io`] if the output file cannot be created (or the signal
    /// handlers of [`finish_on_signals`](Builder::finish_on_signals) cannot
    /// be installed),
    /// [`Error::UnknownFormat`] if its extension names no known format,
    /// [`Error::NoOutput`] without an output,
    /// [`Error::InvalidConfig`] for a top-level JSON key that
    /// [`json_metadata`](Builder::json_metadata) cannot set or a
    /// [`buffer_bytes_per_thread`](Builder::buffer_bytes_per_thread) over
    /// 1 TiB or over a [`buffer_bytes`](Builder::buffer_bytes) set below it,
    /// [`Error::Flusher`] if the flusher thread cannot be spawned.
    pub fn start(mut self) -> Result<TraceGuard, Error> {
        self.check()?;
        let mut slot = SESSION.lock();
        if slot.is_some() {
            return Err(Error::AlreadyStarted);
        }
        let memory = self.memory()?;
        let opened = self.open_output()?;
        let formats = self.formats();
        if self.finish_on_signals {
            crate::session::signals::install(finish_current_session).map_err(|e| Error::Io {
                path: None,
                source: e,
            })?;
        }
        let cal = Calibration::start(false);
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        REGISTRY.open(
            id,
            RingConfig {
                bytes: memory.per_thread,
                budget_bytes: memory.budget_bytes,
                overwrite: self.overwrite,
                thread_time: self.thread_time,
            },
        );
        let file_output = opened.sink.is_some();
        let recorder_bytes = self.recorder_bytes(file_output, memory.budget_bytes);
        // The pool's stock: one mapped-in segment of each size a thread's
        // ring grows through, up to 1 MiB, within an eighth of the budget
        // (`record::budget`). Here, not on the flusher: a thread that records
        // at once grows through its first sizes within microseconds, before
        // the flusher runs, and would map them in itself (page faults,
        // measured in BENCHMARKS.md). Costs start() that time, once.
        // Not with system tracing only: call sites stay off until a tracing
        // session starts, maybe never; the flusher stocks after a growth.
        if file_output {
            REGISTRY.budget.pool().stock();
        }
        let control = Arc::new(Control::new());
        let process = {
            let mut p = ProcessInfo::current(self.process_name.take());
            p.labels = std::mem::take(&mut self.process_labels);
            p.sort_index = self.process_sort_index;
            p
        };
        let link = self.system_tracing.then(|| {
            // The connection thread only wakes the flusher for its commands.
            let waker = control.waker.clone();
            Link::new(
                crate::system::transport::default_address(),
                process.name.clone(),
                Box::new(move || waker.wake()),
            )
        });
        // Captures are written from the flight recorder's store; triggers
        // also go to the tracing service.
        let captures =
            (self.capture.is_some() && self.overwrite && file_output) || self.system_tracing;
        let path = opened.path.clone();
        let outputs = self.outputs(
            opened,
            &formats,
            link.as_ref(),
            &control,
            captures,
            recorder_bytes,
        );
        let flusher = Flusher::new(
            control.clone(),
            outputs,
            Env {
                cal,
                process,
                sites: Default::default(),
            },
            recorder_bytes,
            self.flush_interval.max(Duration::from_millis(1)),
            crate::record::ring::GROWTH.count(),
        );
        let (handle, producer) = spawn(flusher, link, &control, recorder_bytes)?;
        control.waker.wait_parked();
        // Without a file, only system tracing sessions turn call sites on
        // (and the OTLP export, which takes the builder's filter too).
        crate::record::layout::OTEL_RECORDS.store(self.exports(), Ordering::Relaxed);
        callsite::replace_filter(if file_output || self.exports() {
            std::mem::replace(&mut self.filter, CategoryFilter::none())
        } else {
            CategoryFilter::none()
        });
        let spans_not_stored_at_start = counters::spans_not_stored();
        callsite::set_active(true);
        // CPU sampling (`sampling`), off unless asked for.
        crate::sampling::start(self.cpu_sampling);
        *slot = Some(Session {
            id,
            control,
            handle,
            path: path.clone(),
            formats,
            producer,
            captures,
            spans_not_stored_at_start,
        });
        drop(slot);
        AT_EXIT.call_once(|| {
            // SAFETY: `finish_at_exit` is an `extern "C" fn()` that never
            // unwinds (it catches panics); registering it has no other
            // precondition. A failure to register (non-zero) only loses the
            // exit-path guarantee, which `start` cannot fix, so it is ignored.
            unsafe {
                libc::atexit(finish_at_exit);
            }
        });
        Ok(TraceGuard {
            id,
            path,
            stopped: false,
        })
    }

    /// Whether the session exports spans over OTLP (feature `otlp`).
    fn exports(&self) -> bool {
        #[cfg(feature = "otlp")]
        return self.otlp.is_some();
        #[cfg(not(feature = "otlp"))]
        false
    }

    /// Options that cannot go together, or cannot be honoured.
    fn check(&self) -> Result<(), Error> {
        #[cfg(feature = "otlp")]
        if let Some(c) = &self.otlp {
            crate::otlp::http::Url::parse(&c.url)
                .map_err(|e| Error::InvalidConfig(format!("OTLP endpoint: {e}")))?;
        }
        if let Some(key) = &self.json_key_error {
            return Err(Error::InvalidConfig(format!(
                "json_metadata: the top-level key {key:?} is reserved or given twice"
            )));
        }
        if self.overwrite && self.max_file_bytes.is_some() && self.max_files == 1 {
            return Err(Error::InvalidConfig(
                "max_files(1) (a hard disk limit) is for a streaming session, not with \
                 overwrite(true)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The largest ring of a thread and the process-wide budget, checked.
    fn memory(&self) -> Result<Memory, Error> {
        let per_thread = self
            .buffer_bytes
            .unwrap_or(crate::record::registry::DEFAULT_RING_BYTES);
        if per_thread > (1usize << 40) {
            return Err(Error::InvalidConfig(format!(
                "buffer_bytes_per_thread {per_thread} is too large"
            )));
        }
        let ring_bytes = crate::record::budget::ring_bytes(per_thread);
        let budget_bytes = match (self.budget_bytes, self.buffer_bytes) {
            (Some(b), _) if b < MIN_BUDGET_BYTES => {
                return Err(Error::InvalidConfig(format!(
                    "buffer_bytes {b} is less than {MIN_BUDGET_BYTES}"
                )));
            }
            // Both asked, and no ring could grow to its size in the budget:
            // said, not cut silently.
            (Some(b), Some(_)) if ring_bytes > b => {
                return Err(Error::InvalidConfig(format!(
                    "buffer_bytes_per_thread {per_thread} (a ring of {ring_bytes} bytes) is \
                     more than buffer_bytes {b}: raise buffer_bytes, or leave it unset to \
                     follow buffer_bytes_per_thread"
                )));
            }
            (Some(b), _) => b,
            (None, _) => crate::record::budget::default_for(per_thread),
        };
        Ok(Memory {
            per_thread,
            budget_bytes,
        })
    }

    /// Opens the output: creates (or truncates) the file, or takes the
    /// writer.
    fn open_output(&mut self) -> Result<Opened, Error> {
        Ok(match std::mem::replace(&mut self.output, Output::None) {
            Output::None if self.system_tracing || self.exports() => Opened {
                sink: None,
                format: Format::Perfetto,
                path: None,
            },
            Output::None => return Err(Error::NoOutput),
            Output::Writer(w) => Opened {
                sink: Some(Sink::new(w, "the configured writer".into())),
                format: self.format.unwrap_or(Format::Perfetto),
                path: None,
            },
            Output::Path(p) => {
                let format = match self.format.or_else(|| Format::from_path(&p)) {
                    Some(f) => f,
                    None => return Err(Error::UnknownFormat(p)),
                };
                let file =
                    file::create::create_named(&p, self.file_mode).map_err(|e| Error::Io {
                        path: Some(p.clone()),
                        source: e,
                    })?;
                Opened {
                    sink: Some(Sink::file(file, p.display().to_string(), Units::of(format))),
                    format,
                    path: Some(p),
                }
            }
        })
    }

    /// How the session writes every file it makes.
    fn formats(&self) -> Formats {
        Formats {
            perfetto: PerfettoOptions {
                source_locations: self.source_locations,
                omit_needs_flag: self.compact_packets,
            },
            // CPU samples live in the object form's `samples` (`sampling`).
            json: {
                let mut json = self.json.clone();
                json.object |= self.cpu_sampling.hz > 0;
                json
            },
            compressed_packets: self.compressed_packets,
            overwrite: self.overwrite,
            mode: self.file_mode,
        }
    }

    /// A flight recorder keeps the process's most recent records in one
    /// store of half the budget; the rings share the other half.
    fn recorder_bytes(&self, file_output: bool, budget_bytes: u64) -> u64 {
        if !(self.overwrite && file_output) {
            return 0;
        }
        let want = budget_bytes / 2;
        if REGISTRY.budget.try_take(want) {
            want
        } else {
            0 // what earlier sessions' rings still hold: the smallest store
        }
    }

    /// The outputs of the session: its own file (with the windows, the
    /// flight recorder and the captures in front of it) and system
    /// tracing's feed.
    fn outputs(
        &self,
        opened: Opened,
        formats: &Formats,
        link: Option<&Arc<Link>>,
        control: &Arc<Control>,
        captures: bool,
        recorder_bytes: u64,
    ) -> Outputs {
        let Opened { sink, format, path } = opened;
        let file_output = sink.is_some();
        let output = sink.map(|mut sink| {
            if self.compressed_packets {
                sink.compress_perfetto_packets();
            }
            File::new(formats.encoder(format), sink)
        });
        let system = link.map(|link| {
            SystemFeed::new(
                link.clone(),
                PerfettoOptions {
                    source_locations: self.source_locations,
                    omit_needs_flag: false,
                },
            )
        });
        let mut windows = Windows::new(path.clone(), output.is_some());
        match (&path, self.max_file_bytes) {
            (Some(_), Some(max)) if self.max_files == 1 => windows = windows.with_hard_limit(max),
            (Some(p), Some(max)) => {
                let limit = file::parts::DiskLimit::new(p.clone(), max, self.max_files, format);
                windows = windows.with_disk_limit(limit, formats.clone());
            }
            _ => {}
        }
        let file = FileOutput::new(
            output,
            windows,
            captures.then(|| capture::Captures::new(self.capture.clone(), formats.clone())),
            // A flight recorder writes into the file: none without one.
            (self.overwrite && file_output).then(|| Recorder::new(recorder_bytes)),
            system.is_some(),
            control.clone(),
        );
        let slow_scopes = self.capture.as_ref().and_then(|c| c.slow_scopes.clone());
        let file = match slow_scopes {
            Some(rule) => file.with_slow_scopes(capture::SlowScopes::new(rule)),
            None => file,
        };
        let mut outputs = Outputs::default();
        outputs.push(file);
        if let Some(system) = system {
            outputs.push(system);
        }
        #[cfg(feature = "otlp")]
        if let Some(config) = &self.otlp {
            outputs.push(crate::otlp::OtlpOutput::new(config.clone()));
        }
        #[cfg(test)]
        if let Some(o) = super::tests::TEST_OUTPUT.lock().unwrap().take() {
            outputs.push_boxed(o);
        }
        outputs
    }
}

/// The system tracing connection and its thread.
type Producer = Option<(Arc<Link>, JoinHandle<()>)>;

/// The flusher thread: its totals and the session's own file's error.
type FlusherThread = JoinHandle<(crate::Stats, Option<std::io::Error>)>;

/// Spawns the flusher and, with system tracing, the producer's connection
/// thread; a failure undoes what was started.
fn spawn(
    flusher: Flusher,
    link: Option<Arc<Link>>,
    control: &Control,
    recorder_bytes: u64,
) -> Result<(FlusherThread, Producer), Error> {
    #[cfg(test)]
    if super::tests::FAIL_FLUSHER_SPAWN.swap(false, Ordering::Relaxed) {
        drop(flusher);
        return Err(abandon_start(recorder_bytes, "a test's failure"));
    }
    let handle = std::thread::Builder::new()
        .name("ringtrace-flusher".into())
        .spawn(move || flusher.run())
        .map_err(|e| abandon_start(recorder_bytes, e))?;
    let Some(link) = link else {
        return Ok((handle, None));
    };
    let l = link.clone();
    let spawned = std::thread::Builder::new()
        .name("ringtrace-producer".into())
        .spawn(move || crate::system::producer::run(l));
    match spawned {
        Ok(h) => Ok((handle, Some((link, h)))),
        Err(e) => {
            control.request_stop();
            let _ = handle.join();
            REGISTRY.close();
            Err(Error::Flusher(format!(
                "cannot start the system tracing thread: {e}"
            )))
        }
    }
}

/// Undoes a start whose flusher could not be spawned: the rings and the
/// pool (`Registry::close`) and the flight recorder's store, which the
/// flusher would have given back when it ended.
fn abandon_start(recorder_bytes: u64, e: impl std::fmt::Display) -> Error {
    REGISTRY.close();
    REGISTRY.budget.give_back(recorder_bytes);
    Error::Flusher(format!("cannot start the flusher thread: {e}"))
}
