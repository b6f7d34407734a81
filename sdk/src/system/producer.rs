//! The producer's connection thread: connects to traced (with back-off while
//! it is absent or after it went away), binds `ProducerPort`, registers the
//! `track_event` data source, and turns the service's async commands into
//! controls for the flusher thread, which owns the data (see `feed`). Sends
//! from both threads go through the [`Link`]. Trigger names the flusher
//! queues (`triggers`) go out from a second thread of the connection's, the
//! trigger thread, so that no flusher pass waits on the service for them.

#![forbid(unsafe_code)]

use super::chunks::Memory;
use super::shm::SharedMemory;
use super::transport::{FrameReader, Stream};
use super::triggers::{Dropped, Triggers};
use super::wire::{self, Command, DataSourceConfig, Frame, MAX_FRAME};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the connection thread asks of the flusher, tagged with the
/// connection it came from (ids die with their connection).
pub(crate) enum Control {
    Setup {
        conn: u64,
        memory: Memory,
    },
    Start {
        conn: u64,
        instance: u64,
        config: DataSourceConfig,
    },
    Stop {
        conn: u64,
        instance: u64,
    },
    /// Every instance flushes (the service names those it waits for).
    Flush {
        conn: u64,
        request_id: u64,
    },
    Clear {
        conn: u64,
        instances: Vec<u64>,
    },
    Disconnected {
        conn: u64,
    },
}

/// What wakes the flusher (the session's waker, given at start).
pub(crate) type Wake = Box<dyn Fn() + Send + Sync>;

/// The sending half of a live connection.
struct Conn {
    id: u64,
    stream: Stream,
    service_id: u32,
    methods: HashMap<String, u32>,
    next_request: u64,
    /// How many categories the `track_event` descriptor sent last listed.
    announced: usize,
}

impl Conn {
    /// Calls `method` (which the service offers); an error ends the
    /// connection, but for a frame over the protocol's limit, which is not
    /// sent ([`Oversized`]: traced would drop the connection for it).
    fn call(&mut self, method: &str, args: &[u8], drop_reply: bool) -> io::Result<()> {
        let method_id = *self
            .methods
            .get(method)
            .ok_or_else(|| io::Error::other(format!("traced offers no {method}")))?;
        self.next_request += 1;
        let frame = wire::invoke_frame(
            self.next_request,
            self.service_id,
            method_id,
            args,
            drop_reply,
        );
        if frame.len() > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                Oversized(format!(
                    "a {method} frame of {} bytes, over the protocol's {MAX_FRAME}",
                    frame.len()
                )),
            ));
        }
        self.stream.write_all(&frame)
    }

    /// Ends the connection after `e`, unless `e` refused a frame before
    /// sending it (the connection is intact).
    fn failed(g: &mut Option<Conn>, e: &io::Error) {
        if !e.get_ref().is_some_and(|r| r.is::<Oversized>()) {
            if let Some(c) = g.take() {
                c.stream.shutdown();
            }
        }
    }
}

/// A frame `Conn::call` refused to send: over the protocol's limit.
#[derive(Debug)]
struct Oversized(String);

impl std::fmt::Display for Oversized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Oversized {}

/// Shared by the connection thread and the flusher.
pub(crate) struct Link {
    pub(crate) address: String,
    producer_name: String,
    conn: Mutex<Option<Conn>>,
    /// A handle on the socket of the connection being made or served, to
    /// end it at shut-down without waiting for `conn`'s lock (a send may
    /// hold it) and during the handshake (before `conn` is set).
    closer: Mutex<Option<Stream>>,
    /// Trigger names from the flusher, for the trigger thread.
    triggers: Triggers,
    controls: Mutex<Vec<Control>>,
    /// Wakes the flusher (which takes the controls): all the connection
    /// thread needs of it.
    wake_flusher: Wake,
    shutdown: AtomicBool,
    sleep: Mutex<()>,
    sleep_cv: Condvar,
    next_conn: AtomicU64,
    /// Connections made so far (tests and stats).
    pub(crate) connections: AtomicU64,
}

/// Back-off between connection attempts: 1 s, doubling, at most 10 s.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How long one send may block before the connection is given up.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long shut-down waits for trigger names still queued to go out.
const TRIGGERS_AT_STOP: Duration = Duration::from_millis(200);
const SDK_VERSION: &str = concat!("ringtrace ", env!("CARGO_PKG_VERSION"));

impl Link {
    pub(crate) fn new(address: String, producer_name: String, wake_flusher: Wake) -> Arc<Link> {
        Arc::new(Link {
            address,
            producer_name,
            conn: Mutex::new(None),
            closer: Mutex::new(None),
            triggers: Triggers::default(),
            controls: Mutex::new(Vec::new()),
            wake_flusher,
            shutdown: AtomicBool::new(false),
            sleep: Mutex::new(()),
            sleep_cv: Condvar::new(),
            next_conn: AtomicU64::new(1),
            connections: AtomicU64::new(0),
        })
    }

    /// Calls `method` on connection `conn`; false if that connection is gone
    /// or the send failed (which ends it).
    pub(crate) fn send(&self, conn: u64, method: &str, args: &[u8], drop_reply: bool) -> bool {
        let mut g = self.conn.lock();
        let Some(c) = g.as_mut().filter(|c| c.id == conn) else {
            return false;
        };
        if !c.methods.contains_key(method) {
            return false;
        }
        if let Err(e) = c.call(method, args, drop_reply) {
            Conn::failed(&mut g, &e);
            return false;
        }
        true
    }

    /// Re-announces `track_event` on the live connection if categories were
    /// first used since its descriptor was sent: UpdateDataSource with the
    /// full descriptor (same name and id, every category known now), so that
    /// the service's view (`perfetto --query`, the UI's category list) keeps
    /// up. True if an update went out. Cold: the flusher calls it only when
    /// the count of known categories changed.
    pub(crate) fn announce_categories(&self) -> bool {
        let categories = crate::record::callsite::known_categories();
        let mut g = self.conn.lock();
        let Some(c) = g.as_mut() else {
            return false;
        };
        // Categories only grow: a list no longer than the one sent is older
        // (the handshake may have read the registry after us).
        if categories.len() <= c.announced {
            return false;
        }
        c.announced = categories.len();
        // Services older than UpdateDataSource learn them at the next connect.
        if !c.methods.contains_key("UpdateDataSource") {
            return false;
        }
        let args = wire::track_event_descriptor(&categories);
        if let Err(e) = c.call("UpdateDataSource", &args, true) {
            Conn::failed(&mut g, &e);
            return false;
        }
        true
    }

    /// Hands trigger names to the trigger thread (the flusher: returns at
    /// once). Bounded and counted: `triggers`.
    pub(crate) fn queue_triggers(&self, names: &[String]) {
        self.triggers.queue(names);
    }

    /// Trigger names that did not reach the service so far.
    pub(crate) fn triggers_dropped(&self) -> u64 {
        self.triggers.dropped()
    }

    /// `ActivateTriggers` with `names` on the live connection (the trigger
    /// thread); why not, if they were not sent.
    fn activate_triggers(&self, names: &[String]) -> Result<(), Dropped> {
        let mut g = self.conn.lock();
        let Some(c) = g.as_mut() else {
            return Err(Dropped::NotConnected);
        };
        if !c.methods.contains_key("ActivateTriggers") {
            return Err(Dropped::Unsupported);
        }
        if let Err(e) = c.call("ActivateTriggers", &wire::activate_triggers(names), true) {
            Conn::failed(&mut g, &e);
            return Err(Dropped::SendFailed);
        }
        Ok(())
    }

    /// The controls queued since the last call.
    pub(crate) fn take_controls(&self, out: &mut Vec<Control>) {
        out.append(&mut self.controls.lock());
    }

    fn push(&self, c: Control) {
        self.controls.lock().push(c);
        (self.wake_flusher)();
    }

    /// Ends the connection thread (after the flusher's last commits):
    /// trigger names still queued get [`TRIGGERS_AT_STOP`] to go out, then
    /// the rest are dropped (counted) and the connection ends, even in the
    /// middle of a send or of the handshake.
    pub(crate) fn shut_down(&self) {
        self.triggers.drain(TRIGGERS_AT_STOP);
        self.triggers.close();
        self.shutdown.store(true, Ordering::Release);
        if let Some(s) = self.closer.lock().as_ref() {
            s.shutdown();
        }
        let _g = self.sleep.lock();
        self.sleep_cv.notify_all();
    }

    /// Keeps a handle on `stream` for `shut_down`; an error if the session
    /// is already shutting down (the stream is then ended).
    fn closable(&self, stream: &Stream) -> io::Result<()> {
        let handle = stream.try_clone()?;
        let mut closer = self.closer.lock();
        // `shut_down` sets the flag before it takes this lock: either it
        // finds the handle, or the flag is seen here.
        if self.shutdown.load(Ordering::Acquire) {
            handle.shutdown();
            return Err(io::Error::other("shutting down"));
        }
        *closer = Some(handle);
        Ok(())
    }

    fn sleep(&self, d: Duration) {
        let mut g = self.sleep.lock();
        if !self.shutdown.load(Ordering::Acquire) {
            self.sleep_cv.wait_for(&mut g, d);
        }
    }
}

/// The connection thread: runs the trigger thread beside its loop, and
/// ends it when the loop ends.
pub(crate) fn run(link: Arc<Link>) {
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("ringtrace-triggers".into())
            .spawn_scoped(s, || send_triggers(&link));
        if let Err(e) = spawned {
            eprintln!(
                "ringtrace: cannot start the thread that sends trigger names to the Perfetto \
                 tracing service: {e}; none is sent"
            );
            link.triggers.close();
        }
        connect_loop(&link);
        link.triggers.close();
    });
}

/// The trigger thread: sends the names the flusher queued, a frame at a
/// time (at most `triggers::MAX_QUEUED`), counting those it cannot send.
fn send_triggers(link: &Link) {
    let mut names = Vec::new();
    while link.triggers.take(&mut names) {
        if let Err(why) = link.activate_triggers(&names) {
            link.triggers.drop_names(names.len() as u64, why);
        }
        names.clear();
        link.triggers.settled();
    }
}

/// The connection thread's loop: connect, serve, back off, until shut down.
fn connect_loop(link: &Link) {
    let mut backoff = BACKOFF_FIRST;
    let mut said_absent = false;
    while !link.shutdown.load(Ordering::Acquire) {
        match Stream::connect(&link.address) {
            Ok(stream) => {
                backoff = BACKOFF_FIRST;
                said_absent = false;
                let conn = link.next_conn.fetch_add(1, Ordering::Relaxed);
                let result = link
                    .closable(&stream)
                    .and_then(|()| serve(link, stream, conn));
                link.closer.lock().take();
                link.conn.lock().take();
                link.push(Control::Disconnected { conn });
                if link.shutdown.load(Ordering::Acquire) {
                    break;
                }
                let why = result.err().map(|e| format!(" ({e})")).unwrap_or_default();
                eprintln!(
                    "ringtrace: lost the connection to the Perfetto tracing service at {}{why}; reconnecting",
                    link.address
                );
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                // A malformed address stays malformed: no point in retrying.
                eprintln!(
                    "ringtrace: cannot use the Perfetto producer socket address: {e}; \
                     system tracing records nothing"
                );
                return;
            }
            Err(e) => {
                if !said_absent {
                    said_absent = true;
                    eprintln!(
                        "ringtrace: no Perfetto tracing service at {} ({e}); recording nothing for it \
                         until it starts, retrying in the background",
                        link.address
                    );
                }
            }
        }
        link.sleep(backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

const REQ_BIND: u64 = 1;
const REQ_INIT: u64 = 2;
const REQ_COMMANDS: u64 = 3;
const REQ_REGISTER: u64 = 4;

/// One connection: the handshake, then commands until it ends.
fn serve(link: &Link, stream: Stream, conn: u64) -> io::Result<()> {
    let mut writer = stream.try_clone()?;
    writer.set_write_timeout(SEND_TIMEOUT)?;
    writer.write_all(&wire::bind_frame(REQ_BIND, "ProducerPort"))?;
    let mut reader = FrameReader::new(stream);
    let (service_id, methods) = loop {
        let frame = reader.next()?;
        match wire::decode_frame(frame) {
            Ok(Frame::BindReply {
                request_id: REQ_BIND,
                success,
                service_id,
                methods,
            }) => {
                if !success {
                    return Err(io::Error::other("traced refused to bind ProducerPort"));
                }
                let methods: HashMap<String, u32> = methods
                    .into_iter()
                    .map(|(id, n)| (n.to_owned(), id))
                    .collect();
                break (service_id, methods);
            }
            Ok(_) => continue,
            Err(_) => return Err(io::Error::other("malformed frame from traced")),
        }
    };
    for m in [
        "InitializeConnection",
        "GetAsyncCommand",
        "RegisterDataSource",
        "CommitData",
    ] {
        if !methods.contains_key(m) {
            return Err(io::Error::other(format!("traced offers no {m}")));
        }
    }
    // The handshake goes out under the connection's lock, which publishes
    // the connection only once its data source is registered: an update
    // from the flusher (`announce_categories`) always follows the register.
    {
        let mut g = link.conn.lock();
        let mut c = Conn {
            id: conn,
            stream: writer,
            service_id,
            methods,
            next_request: REQ_REGISTER,
            announced: 0,
        };
        let categories = crate::record::callsite::known_categories();
        let init = wire::initialize_connection(&link.producer_name, 0, 0, SDK_VERSION);
        let register = wire::track_event_descriptor(&categories);
        let m = |n: &str| c.methods[n];
        let mut frames = wire::invoke_frame(
            REQ_INIT,
            service_id,
            m("InitializeConnection"),
            &init,
            false,
        );
        frames.extend(wire::invoke_frame(
            REQ_COMMANDS,
            service_id,
            m("GetAsyncCommand"),
            &[],
            false,
        ));
        frames.extend(wire::invoke_frame(
            REQ_REGISTER,
            service_id,
            m("RegisterDataSource"),
            &register,
            false,
        ));
        c.stream.write_all(&frames)?;
        c.announced = categories.len();
        // A shut-down that ran before this lock found no connection to end:
        // end it here (the reader would wait on traced otherwise).
        if link.shutdown.load(Ordering::Acquire) {
            c.stream.shutdown();
            return Err(io::Error::other("shutting down"));
        }
        *g = Some(c);
    }
    link.connections.fetch_add(1, Ordering::Relaxed);
    let mut emulation = false;
    loop {
        let frame = reader.next()?;
        let Ok(Frame::Reply {
            request_id,
            success,
            has_more,
            reply,
        }) = wire::decode_frame(frame)
        else {
            continue;
        };
        match request_id {
            REQ_INIT => {
                if !success {
                    return Err(io::Error::other("traced refused the connection"));
                }
                emulation = wire::use_shmem_emulation(reply).unwrap_or(false);
            }
            REQ_COMMANDS => {
                if !success || !has_more {
                    return Err(io::Error::other("traced ended the command stream"));
                }
                let Ok(cmd) = wire::decode_command(reply) else {
                    continue;
                };
                command(link, &mut reader, conn, emulation, cmd)?;
            }
            _ => {}
        }
    }
}

fn command(
    link: &Link,
    reader: &mut FrameReader,
    conn: u64,
    emulation: bool,
    cmd: Command,
) -> io::Result<()> {
    match cmd {
        Command::SetupTracing { page_size_kb } => {
            let page_size = (page_size_kb as usize * 1024).clamp(4096, 32 * 1024);
            let memory = if emulation {
                Memory::Emulated { page_size }
            } else {
                let fd = reader
                    .take_fd()
                    .ok_or_else(|| io::Error::other("SetupTracing came without shared memory"))?;
                Memory::Shared(Arc::new(SharedMemory::map(fd, page_size)?))
            };
            link.push(Control::Setup { conn, memory });
        }
        Command::StartDataSource {
            instance_id,
            config,
        } if config.name == "track_event" => link.push(Control::Start {
            conn,
            instance: instance_id,
            config,
        }),
        Command::StopDataSource { instance_id } => link.push(Control::Stop {
            conn,
            instance: instance_id,
        }),
        Command::Flush { request_id, .. } => link.push(Control::Flush { conn, request_id }),
        Command::ClearIncrementalState { instance_ids } => link.push(Control::Clear {
            conn,
            instances: instance_ids,
        }),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_frame_over_the_limit_is_not_sent_and_the_connection_stays() {
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let mut g = Some(Conn {
            id: 1,
            stream: Stream::Unix(ours),
            service_id: 1,
            methods: HashMap::from([("M".to_string(), 1)]),
            next_request: 0,
            announced: 0,
        });
        let c = g.as_mut().unwrap();
        let e = c.call("M", &vec![0; MAX_FRAME], true).unwrap_err();
        assert!(e.to_string().contains("a M frame of"), "{e}");
        Conn::failed(&mut g, &e);
        let mut buf = [0u8; 64];
        let nothing = theirs.read(&mut buf).unwrap_err();
        assert_eq!(nothing.kind(), io::ErrorKind::WouldBlock, "nothing sent");
        g.as_mut()
            .expect("still connected")
            .call("M", b"ok", true)
            .unwrap();
        assert!(
            theirs.read(&mut buf).unwrap() > 0,
            "the next frame goes out"
        );
        Conn::failed(&mut g, &io::Error::other("a failed send"));
        assert!(g.is_none(), "any other error ends the connection");
    }
}
