//! A file the session writes, and how it makes one: [`File`] (an encoder,
//! the sink its bytes go to, and what of them is in the file), [`Target`]
//! (a file and where it is, handed between the session's output and its
//! windows), [`Formats`] (the options every new file of the session is
//! written with).

#![forbid(unsafe_code)]

use crate::encode::json::{JsonEncoder, JsonOptions};
use crate::encode::perfetto::{PerfettoEncoder, PerfettoOptions};
use crate::encode::Encoder;
use crate::session::builder::Format;
use crate::session::error::Error;
use crate::session::file::create;
use crate::session::file::sink::{Sink, Units};
use std::path::{Path, PathBuf};

/// How the session writes a file: what a new output needs besides its path.
#[derive(Clone)]
pub(crate) struct Formats {
    pub(crate) perfetto: PerfettoOptions,
    pub(crate) json: JsonOptions,
    pub(crate) compressed_packets: bool,
    /// The session is in flight-recorder (overwrite) mode.
    pub(crate) overwrite: bool,
    /// The mode of the files the session creates (`files`).
    pub(crate) mode: u32,
}

impl Formats {
    pub(crate) fn encoder(&self, format: Format) -> Box<dyn Encoder> {
        match format {
            Format::Perfetto => Box::new(PerfettoEncoder::new(self.perfetto)),
            Format::Json => Box::new(JsonEncoder::with_options(self.json.clone())),
        }
    }

    /// Creates (or truncates) the file the user named at `path` and what
    /// writes it (`rotate_output`, `dump_to`).
    pub(crate) fn target(&self, path: &Path) -> Result<Target, Error> {
        let format =
            Format::from_path(path).ok_or_else(|| Error::UnknownFormat(path.to_path_buf()))?;
        let file = create::create_named(path, self.mode).map_err(|e| Error::Io {
            path: Some(path.to_path_buf()),
            source: e,
        })?;
        Ok(self.writing(path, file, format, false))
    }

    /// What writes `file`, created at `path`, in `format`: laid out as the
    /// session's own file (a kill leaves whole events). `own`: the
    /// session's own output (or a part of it).
    pub(crate) fn writing(
        &self,
        path: &Path,
        file: std::fs::File,
        format: Format,
        own: bool,
    ) -> Target {
        let mut sink = Sink::file(file, path.display().to_string(), Units::of(format));
        if self.compressed_packets && format == Format::Perfetto {
            sink.compress_perfetto_packets();
        }
        Target {
            file: Some(File::new(self.encoder(format), sink)),
            path: Some(path.to_path_buf()),
            own,
        }
    }
}

/// A file and where it is.
pub(crate) struct Target {
    /// `None`: no file, as a session with system tracing only.
    pub(crate) file: Option<File>,
    /// The file (`None`: the session's writer).
    pub(crate) path: Option<PathBuf>,
    /// The session's own output or a part of it (not a file
    /// `rotate_output` or `dump_to` named): the disk bound and its guard
    /// apply.
    pub(crate) own: bool,
}

/// One file being written: its encoder and where its bytes go. The
/// session's file and every capture window's file is one.
pub(crate) struct File {
    pub(crate) encoder: Box<dyn Encoder>,
    pub(crate) sink: Sink,
    /// The encoder's count of events at the last write that succeeded:
    /// those encoded after it are in the file only once a write carries
    /// them (none is after a write failed).
    durable: u64,
}

impl File {
    pub(crate) fn new(encoder: Box<dyn Encoder>, sink: Sink) -> File {
        File {
            encoder,
            sink,
            durable: 0,
        }
    }

    /// Writes and clears `out`, which holds every event encoded since the
    /// last write.
    pub(crate) fn write(&mut self, out: &mut Vec<u8>) {
        let events = self.encoder.stats().events;
        self.sink.write(out);
        if !self.sink.failed() {
            self.durable = events;
        }
    }

    /// A write the caller made (borrowing the encoder meanwhile) succeeded
    /// with every event up to the encoder's count `events`.
    pub(crate) fn wrote(&mut self, events: u64) {
        self.durable = events;
    }

    pub(crate) fn flush(&mut self) {
        self.sink.flush();
    }

    /// Events in the file: carried by writes that succeeded.
    pub(crate) fn events_in_file(&self) -> u64 {
        self.durable
    }

    /// Events encoded that no write carried into the file (a write failed).
    pub(crate) fn events_unwritten(&self) -> u64 {
        self.encoder.stats().events - self.durable
    }
}

/// Bytes the flusher lets pile up before it writes them out: large enough
/// for few system calls (one per 256 KiB: little against the time of
/// encoding them), small enough to stay in cache on their
/// way out. This and the sink's copy laid out in pages are most of the
/// flusher's working memory, which is not in the budget: 256 KiB grows
/// peak RSS beyond the budget less than 1 MiB did, whatever the number of
/// threads (BENCHMARKS.md, "Measured for design choices").
pub(crate) const WRITE_AT: usize = 256 << 10;

/// Writes `out` out once it holds [`WRITE_AT`] bytes.
pub(crate) fn write_if_full(file: &mut Option<File>, out: &mut Vec<u8>) {
    if out.len() >= WRITE_AT {
        write_out(file, out);
    }
}

/// Writes `out` to the file, if any (else drops it).
pub(crate) fn write_out(file: &mut Option<File>, out: &mut Vec<u8>) {
    match file {
        Some(f) => f.write(out),
        None => out.clear(),
    }
}
