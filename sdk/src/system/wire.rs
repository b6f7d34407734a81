//! The producer protocol's messages: the IPC frame and the `ProducerPort`
//! requests we send, and a bounds-checked reader for what traced sends
//! (replies, async commands, data source configs). Field numbers are
//! Perfetto's (`protos/perfetto/ipc/*.proto`, `protos/perfetto/config/*`).
//! Unknown fields are skipped; a malformed message is an error, never a panic.

#![forbid(unsafe_code)]

use crate::encode::protowire::{bytes, nested, string, uint};

/// One field read from a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    pub(crate) fn as_u64(self) -> u64 {
        match self {
            Value::Varint(v) | Value::Fixed64(v) => v,
            Value::Fixed32(v) => v as u64,
            Value::Bytes(_) => 0,
        }
    }

    pub(crate) fn as_bytes(self) -> &'a [u8] {
        match self {
            Value::Bytes(b) => b,
            _ => &[],
        }
    }

    pub(crate) fn as_str(self) -> &'a str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

/// A message that did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// Reads a varint at `*pos` (at most 10 bytes).
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, Malformed> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos).ok_or(Malformed)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(Malformed)
}

/// Iterates the top-level fields of a message.
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

pub(crate) fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, pos: 0 }
}

impl<'a> Fields<'a> {
    /// The byte range of the field read last ends at this offset.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let r = (|| {
            let key = read_varint(self.buf, &mut self.pos)?;
            let field = u32::try_from(key >> 3).map_err(|_| Malformed)?;
            let value = match key & 7 {
                0 => Value::Varint(read_varint(self.buf, &mut self.pos)?),
                1 => {
                    let b = self.buf.get(self.pos..self.pos + 8).ok_or(Malformed)?;
                    self.pos += 8;
                    Value::Fixed64(u64::from_le_bytes(b.try_into().unwrap()))
                }
                2 => {
                    let len = read_varint(self.buf, &mut self.pos)? as usize;
                    let end = self.pos.checked_add(len).ok_or(Malformed)?;
                    let b = self.buf.get(self.pos..end).ok_or(Malformed)?;
                    self.pos = end;
                    Value::Bytes(b)
                }
                5 => {
                    let b = self.buf.get(self.pos..self.pos + 4).ok_or(Malformed)?;
                    self.pos += 4;
                    Value::Fixed32(u32::from_le_bytes(b.try_into().unwrap()))
                }
                _ => return Err(Malformed),
            };
            Ok((field, value))
        })();
        if r.is_err() {
            self.pos = self.buf.len();
        }
        Some(r)
    }
}

// IPCFrame
const F_REQUEST_ID: u32 = 2;
const F_BIND_SERVICE: u32 = 3;
const F_BIND_SERVICE_REPLY: u32 = 4;
const F_INVOKE_METHOD: u32 = 5;
const F_INVOKE_METHOD_REPLY: u32 = 6;
const F_REQUEST_ERROR: u32 = 7;

/// The largest frame either side accepts (header + payload).
pub(crate) const MAX_FRAME: usize = 128 * 1024;

/// A decoded frame from traced.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame<'a> {
    BindReply {
        request_id: u64,
        success: bool,
        service_id: u32,
        /// (method id, name)
        methods: Vec<(u32, &'a str)>,
    },
    Reply {
        request_id: u64,
        success: bool,
        has_more: bool,
        reply: &'a [u8],
    },
    Error {
        request_id: u64,
        message: &'a str,
    },
    Other,
}

pub(crate) fn decode_frame(buf: &[u8]) -> Result<Frame<'_>, Malformed> {
    let mut request_id = 0;
    let mut frame = Frame::Other;
    for f in fields(buf) {
        let (n, v) = f?;
        match n {
            F_REQUEST_ID => request_id = v.as_u64(),
            F_BIND_SERVICE_REPLY => {
                let (mut success, mut service_id, mut methods) = (false, 0, Vec::new());
                for f in fields(v.as_bytes()) {
                    match f? {
                        (1, v) => success = v.as_u64() != 0,
                        (2, v) => service_id = v.as_u64() as u32,
                        (3, v) => {
                            let (mut id, mut name) = (0, "");
                            for f in fields(v.as_bytes()) {
                                match f? {
                                    (1, v) => id = v.as_u64() as u32,
                                    (2, v) => name = v.as_str(),
                                    _ => {}
                                }
                            }
                            if id != 0 && !name.is_empty() {
                                methods.push((id, name));
                            }
                        }
                        _ => {}
                    }
                }
                frame = Frame::BindReply {
                    request_id: 0,
                    success,
                    service_id,
                    methods,
                };
            }
            F_INVOKE_METHOD_REPLY => {
                let (mut success, mut has_more, mut reply) = (false, false, &[][..]);
                for f in fields(v.as_bytes()) {
                    match f? {
                        (1, v) => success = v.as_u64() != 0,
                        (2, v) => has_more = v.as_u64() != 0,
                        (3, v) => reply = v.as_bytes(),
                        _ => {}
                    }
                }
                frame = Frame::Reply {
                    request_id: 0,
                    success,
                    has_more,
                    reply,
                };
            }
            F_REQUEST_ERROR => {
                let mut message = "";
                for f in fields(v.as_bytes()) {
                    if let (1, v) = f? {
                        message = v.as_str();
                    }
                }
                frame = Frame::Error {
                    request_id: 0,
                    message,
                };
            }
            _ => {}
        }
    }
    match &mut frame {
        Frame::BindReply { request_id: r, .. }
        | Frame::Reply { request_id: r, .. }
        | Frame::Error { request_id: r, .. } => *r = request_id,
        Frame::Other => {}
    }
    Ok(frame)
}

/// A frame binding `service`, length prefix included.
pub(crate) fn bind_frame(request_id: u64, service: &str) -> Vec<u8> {
    framed(|f| {
        uint(f, F_REQUEST_ID, request_id);
        nested(f, F_BIND_SERVICE, |b| string(b, 1, service));
    })
}

/// A frame invoking `method` of `service_id` with `args`, length prefix included.
pub(crate) fn invoke_frame(
    request_id: u64,
    service_id: u32,
    method: u32,
    args: &[u8],
    drop_reply: bool,
) -> Vec<u8> {
    framed(|f| {
        uint(f, F_REQUEST_ID, request_id);
        nested(f, F_INVOKE_METHOD, |m| {
            uint(m, 1, service_id as u64);
            uint(m, 2, method as u64);
            bytes(m, 3, args);
            if drop_reply {
                uint(m, 4, 1);
            }
        });
    })
}

fn framed(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = vec![0u8; 4];
    f(&mut v);
    let len = (v.len() - 4) as u32;
    v[..4].copy_from_slice(&len.to_le_bytes());
    v
}

/// InitializeConnectionRequest.
pub(crate) fn initialize_connection(
    producer_name: &str,
    page_hint: u32,
    size_hint: u32,
    sdk_version: &str,
) -> Vec<u8> {
    let mut m = Vec::new();
    if page_hint != 0 {
        uint(&mut m, 1, page_hint as u64);
    }
    if size_hint != 0 {
        uint(&mut m, 2, size_hint as u64);
    }
    string(&mut m, 3, producer_name);
    string(&mut m, 8, sdk_version);
    m
}

/// InitializeConnectionResponse: whether chunks travel in CommitData.
pub(crate) fn use_shmem_emulation(reply: &[u8]) -> Result<bool, Malformed> {
    let mut emulation = false;
    for f in fields(reply) {
        if let (3, v) = f? {
            emulation = v.as_u64() != 0;
        }
    }
    Ok(emulation)
}

/// The id of our `track_event` descriptor: the service matches an
/// UpdateDataSource to the registered source by name and this id (non-zero).
pub(crate) const TRACK_EVENT_ID: u64 = 1;
const _: () = assert!(TRACK_EVENT_ID != 0, "the service ignores updates of id 0");

/// RegisterDataSourceRequest, and UpdateDataSourceRequest (the same message:
/// `{data_source_descriptor = 1}`), for `track_event` listing `categories`.
pub(crate) fn track_event_descriptor(categories: &[&str]) -> Vec<u8> {
    let mut m = Vec::new();
    nested(&mut m, 1, |d| {
        string(d, 1, "track_event");
        uint(d, 2, 1); // will_notify_on_stop
        uint(d, 3, 1); // will_notify_on_start
        uint(d, 4, 1); // handles_incremental_state_clear
        nested(d, 6, |ted| {
            for c in categories {
                nested(ted, 1, |cat| string(cat, 1, c));
            }
        });
        uint(d, 7, TRACK_EVENT_ID);
    });
    m
}

/// ActivateTriggersRequest `{trigger_names = 1}`.
pub(crate) fn activate_triggers(names: &[String]) -> Vec<u8> {
    let mut m = Vec::new();
    for n in names {
        string(&mut m, 1, n);
    }
    m
}

/// RegisterTraceWriterRequest.
pub(crate) fn register_trace_writer(writer_id: u16, target_buffer: u32) -> Vec<u8> {
    let mut m = Vec::new();
    uint(&mut m, 1, writer_id as u64);
    uint(&mut m, 2, target_buffer as u64);
    m
}

/// UnregisterTraceWriterRequest.
pub(crate) fn unregister_trace_writer(writer_id: u16) -> Vec<u8> {
    let mut m = Vec::new();
    uint(&mut m, 1, writer_id as u64);
    m
}

/// NotifyDataSourceStarted/StoppedRequest.
pub(crate) fn notify_data_source(instance_id: u64) -> Vec<u8> {
    let mut m = Vec::new();
    uint(&mut m, 1, instance_id);
    m
}

/// One `ChunksToMove` entry of a CommitDataRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChunkToMove {
    pub(crate) page: u32,
    pub(crate) chunk: u32,
    pub(crate) target_buffer: u32,
    /// The chunk's bytes (header first) when there is no shared memory.
    pub(crate) data: Option<Vec<u8>>,
}

impl ChunkToMove {
    /// Bytes this entry adds to a CommitDataRequest (an upper bound).
    pub(crate) fn encoded_len(&self) -> usize {
        32 + self.data.as_ref().map_or(0, Vec::len)
    }
}

/// CommitDataRequest.
pub(crate) fn commit_data(chunks: &[ChunkToMove], flush_request_id: Option<u64>) -> Vec<u8> {
    let mut m = Vec::new();
    for c in chunks {
        nested(&mut m, 1, |e| {
            uint(e, 1, c.page as u64);
            uint(e, 2, c.chunk as u64);
            uint(e, 3, c.target_buffer as u64);
            if let Some(d) = &c.data {
                bytes(e, 4, d);
            }
        });
    }
    if let Some(id) = flush_request_id {
        uint(&mut m, 3, id);
    }
    m
}

/// An async command of the GetAsyncCommand stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Command {
    SetupTracing {
        page_size_kb: u32,
    },
    SetupDataSource {
        instance_id: u64,
        config: DataSourceConfig,
    },
    StartDataSource {
        instance_id: u64,
        config: DataSourceConfig,
    },
    StopDataSource {
        instance_id: u64,
    },
    Flush {
        instance_ids: Vec<u64>,
        request_id: u64,
    },
    ClearIncrementalState {
        instance_ids: Vec<u64>,
    },
    Unknown,
}

/// The parts of a DataSourceConfig the producer uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DataSourceConfig {
    pub(crate) name: String,
    pub(crate) target_buffer: u32,
    pub(crate) tracing_session_id: u64,
    pub(crate) track_event: TrackEventConfig,
}

/// TrackEventConfig's category and tag lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TrackEventConfig {
    pub(crate) disabled_categories: Vec<String>,
    pub(crate) enabled_categories: Vec<String>,
    pub(crate) disabled_tags: Vec<String>,
    pub(crate) enabled_tags: Vec<String>,
}

pub(crate) fn decode_command(buf: &[u8]) -> Result<Command, Malformed> {
    let mut cmd = Command::Unknown;
    for f in fields(buf) {
        let (n, v) = f?;
        cmd = match n {
            3 => {
                let mut page_size_kb = 0;
                for f in fields(v.as_bytes()) {
                    if let (1, v) = f? {
                        page_size_kb = v.as_u64() as u32;
                    }
                }
                Command::SetupTracing { page_size_kb }
            }
            1 | 6 => {
                let (mut instance_id, mut config) = (0, DataSourceConfig::default());
                for f in fields(v.as_bytes()) {
                    match f? {
                        (1, v) => instance_id = v.as_u64(),
                        (2, v) => config = decode_data_source_config(v.as_bytes())?,
                        _ => {}
                    }
                }
                if n == 1 {
                    Command::StartDataSource {
                        instance_id,
                        config,
                    }
                } else {
                    Command::SetupDataSource {
                        instance_id,
                        config,
                    }
                }
            }
            2 => {
                let mut instance_id = 0;
                for f in fields(v.as_bytes()) {
                    if let (1, v) = f? {
                        instance_id = v.as_u64();
                    }
                }
                Command::StopDataSource { instance_id }
            }
            5 => {
                let (mut instance_ids, mut request_id) = (Vec::new(), 0);
                for f in fields(v.as_bytes()) {
                    match f? {
                        (1, v) => instance_ids.push(v.as_u64()),
                        (2, v) => request_id = v.as_u64(),
                        _ => {}
                    }
                }
                Command::Flush {
                    instance_ids,
                    request_id,
                }
            }
            7 => {
                let mut instance_ids = Vec::new();
                for f in fields(v.as_bytes()) {
                    if let (1, v) = f? {
                        instance_ids.push(v.as_u64());
                    }
                }
                Command::ClearIncrementalState { instance_ids }
            }
            _ => continue,
        };
    }
    Ok(cmd)
}

fn decode_data_source_config(buf: &[u8]) -> Result<DataSourceConfig, Malformed> {
    let mut c = DataSourceConfig::default();
    for f in fields(buf) {
        match f? {
            (1, v) => c.name = v.as_str().to_owned(),
            (2, v) => c.target_buffer = v.as_u64() as u32,
            (4, v) => c.tracing_session_id = v.as_u64(),
            (113, v) => c.track_event = decode_track_event_config(v.as_bytes())?,
            _ => {}
        }
    }
    Ok(c)
}

fn decode_track_event_config(buf: &[u8]) -> Result<TrackEventConfig, Malformed> {
    let mut c = TrackEventConfig::default();
    for f in fields(buf) {
        let (n, v) = f?;
        let list = match n {
            1 => &mut c.disabled_categories,
            2 => &mut c.enabled_categories,
            3 => &mut c.disabled_tags,
            4 => &mut c.enabled_tags,
            _ => continue,
        };
        list.push(v.as_str().to_owned());
    }
    Ok(c)
}

/// Splits a stream of `Trace.packet` fields (what the encoder writes) into
/// its packets, each without `trusted_packet_sequence_id` (field 10, which
/// only the service may set); the removed value says which sequence the
/// packet belongs to. Calls `f(sequence, packet)`.
pub(crate) fn for_each_packet(
    stream: &[u8],
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(u32, &[u8]),
) -> Result<(), Malformed> {
    for field in fields(stream) {
        let (n, v) = field?;
        if n != 1 {
            continue;
        }
        let packet = v.as_bytes();
        scratch.clear();
        let mut seq = 0u32;
        let mut it = fields(packet);
        let mut start = 0;
        while let Some(pf) = it.next() {
            let (pn, pv) = pf?;
            let end = it.position();
            if pn == 10 {
                seq = pv.as_u64() as u32;
            } else {
                scratch.extend_from_slice(&packet[start..end]);
            }
            start = end;
        }
        f(seq, scratch);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
