//! System tracing: ringtrace as a producer for Perfetto's tracing service
//! (`traced`), in Rust, speaking its producer protocol.
//!
//! | module | job |
//! | --- | --- |
//! | `wire` | IPC frames and the `ProducerPort` messages, a bounds-checked protobuf reader |
//! | `transport` | socket addresses (path, `@abstract`, `host:port`, `vsock://CID:PORT`), frame reading with passed fds |
//! | `shm` | the shared memory buffer: fd receipt, mapping, atomic word access (the only `unsafe`: every other module forbids it) |
//! | `chunks` | pages and chunks of the shared memory ABI, writers packing (and fragmenting) packets |
//! | `data_source` | the `track_event` data source: categories per instance, record selection, when to re-announce its categories |
//! | `producer` | the connection thread: connect with back-off, handshake, async commands; UpdateDataSource; the trigger thread beside it |
//! | `triggers` | trigger names from the flusher to the trigger thread: a bounded queue, names refused or dropped counted |
//! | `feed` | the flusher's side: an encoder per instance, commits, flush/stop/clear answers |
//!
//! The recording threads are untouched: they write their rings as always.
//! The flusher drains them once and hands the batches to each of its
//! outputs: the file, and this feed, with one Perfetto encoder per data
//! source instance (tracing session), each given the records of the
//! categories that session selected.
//!
//! Rules: this layer imports nothing of `session`, which uses it (the feed
//! implements `Output`, the seam in `output.rs` below both, in `feed`); the
//! connection thread wakes the flusher through the closure it is given at
//! start.

pub(crate) mod chunks;
pub(crate) mod data_source;
pub(crate) mod feed;
pub(crate) mod producer;
pub(crate) mod shm;
pub(crate) mod transport;
pub(crate) mod triggers;
pub(crate) mod wire;
