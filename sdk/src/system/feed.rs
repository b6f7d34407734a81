//! The flusher's side of system tracing: one Perfetto encoder per data source
//! instance (tracing session), fed the records of the categories that
//! instance selected from the same drained batches as the file, its packets
//! packed into chunks (one writer per packet sequence) and committed to
//! traced; flush, stop and clear requests answered after a full drain;
//! categories first used while connected re-announced (UpdateDataSource).

#![forbid(unsafe_code)]

use super::chunks::{ChunkPool, Full, Writer};
use super::data_source::{Announcer, RecordFilter, Selection};
use super::producer::{Control, Link};
use super::wire::{self, ChunkToMove, MAX_FRAME};
use crate::encode::perfetto::{PerfettoEncoder, PerfettoOptions, SAMPLES_SEQ};
use crate::encode::LOST_EVENT_NAME;
use crate::encode::{Batch, Context, Encoder};
use crate::record::registry::ThreadInfo;
use crate::sampling::SampleView;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Bytes of CommitData entries per frame (the frame limit less headroom).
const COMMIT_BUDGET: usize = MAX_FRAME - 512;

/// One data source instance: one tracing session's view of this process.
struct Instance {
    conn: u64,
    id: u64,
    target_buffer: u32,
    selection: Arc<Selection>,
    filter: RecordFilter,
    encoder: PerfettoEncoder,
    /// Writer per packet sequence (ringtrace sequence id).
    writers: HashMap<u32, Writer>,
}

/// Counts of the system output, added to the session's stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FeedStats {
    /// Events dropped because the shared memory buffer was full.
    pub(crate) events_dropped: u64,
    /// CPU samples dropped because the shared memory buffer was full.
    pub(crate) samples_dropped: u64,
}

pub(crate) struct SystemFeed {
    link: Arc<Link>,
    opts: PerfettoOptions,
    pool: Option<(u64, ChunkPool)>,
    instances: Vec<Instance>,
    live_writers: HashSet<u16>,
    next_writer: u16,
    commits: Vec<ChunkToMove>,
    controls: Vec<Control>,
    flushes: Vec<(u64, u64)>,
    stops: Vec<(u64, u64)>,
    selected: Vec<u64>,
    out: Vec<u8>,
    scratch: Vec<u8>,
    stats: FeedStats,
    announcer: Announcer,
}

impl SystemFeed {
    /// Hands `names` (captures: `session::trigger`) to the connection's
    /// trigger thread, which sends them to the tracing service as
    /// `ActivateTriggers`; returns at once, whatever the service does.
    /// Bounded, and every name not sent counted (`system::triggers`).
    pub(crate) fn activate_triggers(&self, names: &[String]) {
        if !names.is_empty() {
            self.link.queue_triggers(names);
        }
    }

    pub(crate) fn new(link: Arc<Link>, opts: PerfettoOptions) -> SystemFeed {
        SystemFeed {
            link,
            opts,
            pool: None,
            instances: Vec::new(),
            live_writers: HashSet::new(),
            next_writer: 1,
            commits: Vec::new(),
            controls: Vec::new(),
            flushes: Vec::new(),
            stops: Vec::new(),
            selected: Vec::new(),
            out: Vec::new(),
            scratch: Vec::new(),
            stats: FeedStats::default(),
            announcer: Announcer::default(),
        }
    }

    pub(crate) fn stats(&self) -> FeedStats {
        self.stats
    }

    /// Applies what the service asked since the last cycle. True if the
    /// cycle must drain every ring (a flush or a stop is waiting).
    pub(crate) fn begin_cycle(&mut self, ctx: &mut Context<'_>) -> bool {
        // Categories first used since the descriptor went out: one atomic
        // load per cycle here, never a cost of the recording threads.
        let known = crate::record::callsite::categories_known();
        let link = &self.link;
        self.announcer.check(known, std::time::Instant::now, || {
            link.announce_categories()
        });
        self.link.take_controls(&mut self.controls);
        let mut selections_changed = false;
        let mut started = Vec::new();
        for c in std::mem::take(&mut self.controls) {
            match c {
                Control::Setup { conn, memory } => self.pool = Some((conn, ChunkPool::new(memory))),
                Control::Start {
                    conn,
                    instance,
                    config,
                } => {
                    let mut inst = Instance {
                        conn,
                        id: instance,
                        target_buffer: config.target_buffer,
                        selection: Arc::new(Selection::new(config.track_event)),
                        filter: RecordFilter::default(),
                        encoder: PerfettoEncoder::new(self.opts),
                        writers: HashMap::new(),
                    };
                    self.out.clear();
                    inst.encoder.header(ctx, &mut self.out);
                    self.instances.push(inst);
                    let i = self.instances.len() - 1;
                    self.place(i, None, ctx);
                    selections_changed = true;
                    started.push((conn, instance));
                }
                Control::Stop { conn, instance } => self.stops.push((conn, instance)),
                Control::Flush { conn, request_id } => self.flushes.push((conn, request_id)),
                Control::Clear { conn, instances } => {
                    for inst in &mut self.instances {
                        if inst.conn == conn && instances.contains(&inst.id) {
                            inst.encoder.clear_incremental_state();
                        }
                    }
                }
                Control::Disconnected { conn } => {
                    let before = self.instances.len();
                    self.instances.retain(|i| i.conn != conn);
                    selections_changed |= self.instances.len() != before;
                    if self.pool.as_ref().is_some_and(|(c, _)| *c == conn) {
                        self.pool = None;
                        self.commits.clear();
                        self.live_writers.clear();
                    }
                    self.flushes.retain(|&(c, _)| c != conn);
                    self.stops.retain(|&(c, _)| c != conn);
                }
            }
        }
        if selections_changed {
            self.publish_selections();
        }
        // Started only now that the call sites record for them.
        for (conn, instance) in started {
            self.link.send(
                conn,
                "NotifyDataSourceStarted",
                &wire::notify_data_source(instance),
                true,
            );
        }
        !self.flushes.is_empty() || !self.stops.is_empty()
    }

    /// Tells the call sites which categories the live instances record.
    fn publish_selections(&self) {
        let sels: Vec<Arc<Selection>> =
            self.instances.iter().map(|i| i.selection.clone()).collect();
        let wants: Option<crate::record::callsite::SystemWants> = if sels.is_empty() {
            None
        } else {
            Some(Arc::new(move |cat: &str| {
                sels.iter().any(|s| s.enabled(cat))
            }))
        };
        crate::record::callsite::set_system_wants(wants);
    }

    /// Encodes one drained batch for every instance, each the records of the
    /// categories it selected.
    pub(crate) fn batch(&mut self, ctx: &mut Context<'_>, batch: &Batch<'_>) {
        for i in 0..self.instances.len() {
            let inst = &mut self.instances[i];
            let sel = inst.selection.clone();
            inst.filter.select(
                batch.thread.seq_id,
                batch.words,
                &|c| sel.enabled(c),
                ctx.sites,
                &mut self.selected,
            );
            if self.selected.is_empty() && batch.overwritten == 0 {
                continue;
            }
            let sub = Batch {
                thread: batch.thread,
                words: &self.selected,
                overwritten: batch.overwritten,
            };
            self.out.clear();
            inst.encoder.batch(ctx, &sub, &mut self.out);
            self.place(i, Some(batch.thread), ctx);
        }
    }

    /// CPU stack samples (`sampling`): each instance's encoder writes them
    /// on its samples sequence, interning what that instance has not seen
    /// (an instance started late gets every mapping, frame and stack again).
    pub(crate) fn samples(&mut self, ctx: &mut Context<'_>, view: &SampleView<'_>) {
        for i in 0..self.instances.len() {
            self.out.clear();
            self.instances[i].encoder.samples(ctx, view, &mut self.out);
            self.place(i, None, ctx);
        }
    }

    /// `count` events of `thread` were lost outside its records.
    pub(crate) fn note_lost(&mut self, ctx: &mut Context<'_>, thread: &ThreadInfo, count: u64) {
        for i in 0..self.instances.len() {
            self.out.clear();
            self.instances[i]
                .encoder
                .note_lost(ctx, thread, count, &mut self.out);
            self.place(i, Some(thread), ctx);
        }
    }

    /// A thread is gone: its sequences end, their writers are unregistered.
    pub(crate) fn thread_done(&mut self, ctx: &mut Context<'_>, seq_id: u32) {
        for i in 0..self.instances.len() {
            self.out.clear();
            self.instances[i]
                .encoder
                .thread_done(ctx, seq_id, &mut self.out);
            self.place(i, None, ctx);
            let inst = &mut self.instances[i];
            inst.filter.forget_thread(seq_id);
            let conn = inst.conn;
            if let Some(mut w) = inst.writers.remove(&seq_id) {
                if let Some((_, pool)) = self.pool.as_mut() {
                    w.finish_chunk(pool, &mut self.commits);
                }
                self.commit(None);
                self.live_writers.remove(&w.id);
                self.link.send(
                    conn,
                    "UnregisterTraceWriter",
                    &wire::unregister_trace_writer(w.id),
                    true,
                );
            }
        }
    }

    /// Events lost by threads that got no ring (see
    /// `Encoder::note_lost_no_ring`), marked on the process track of every
    /// instance.
    pub(crate) fn note_lost_no_ring(&mut self, ctx: &mut Context<'_>, now_ns: u64, count: u64) {
        for i in 0..self.instances.len() {
            self.out.clear();
            self.instances[i]
                .encoder
                .note_lost_no_ring(ctx, now_ns, count, &mut self.out);
            self.place(i, None, ctx);
        }
    }

    /// Periodic packets (clock snapshots).
    pub(crate) fn tick(&mut self, ctx: &mut Context<'_>) {
        for i in 0..self.instances.len() {
            self.out.clear();
            self.instances[i].encoder.tick(ctx, &mut self.out);
            self.place(i, None, ctx);
        }
    }

    /// The end of a flusher cycle: completes every open chunk and commits
    /// them, then answers the flushes and stops asked before the cycle.
    pub(crate) fn end_cycle(&mut self, ctx: &mut Context<'_>, now_ns: u64) {
        let stops = std::mem::take(&mut self.stops);
        for &(conn, instance) in &stops {
            if let Some(i) = self
                .instances
                .iter()
                .position(|x| x.conn == conn && x.id == instance)
            {
                self.out.clear();
                self.instances[i].encoder.finish(ctx, now_ns, &mut self.out);
                self.place(i, None, ctx);
            }
        }
        self.finish_chunks();
        // An ack for the newest request acks every older one.
        let flush = self.flushes.drain(..).map(|(_, r)| r).max();
        self.commit(flush);
        if stops.is_empty() {
            return;
        }
        let (stopped, keep): (Vec<Instance>, Vec<Instance>) = std::mem::take(&mut self.instances)
            .into_iter()
            .partition(|x| stops.contains(&(x.conn, x.id)));
        self.instances = keep;
        for inst in &stopped {
            for w in inst.writers.values() {
                self.live_writers.remove(&w.id);
                self.link.send(
                    inst.conn,
                    "UnregisterTraceWriter",
                    &wire::unregister_trace_writer(w.id),
                    true,
                );
            }
        }
        // Every stop is acknowledged, also of instances we never started.
        for &(conn, instance) in &stops {
            self.link.send(
                conn,
                "NotifyDataSourceStopped",
                &wire::notify_data_source(instance),
                true,
            );
        }
        self.publish_selections();
    }

    /// The session ends (the program stops recording): everything goes out.
    pub(crate) fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64) {
        for i in 0..self.instances.len() {
            self.out.clear();
            self.instances[i].encoder.finish(ctx, now_ns, &mut self.out);
            self.place(i, None, ctx);
        }
        self.finish_chunks();
        let flush = self.flushes.drain(..).map(|(_, r)| r).max();
        self.commit(flush);
        self.instances.clear();
        crate::record::callsite::set_system_wants(None);
    }

    fn finish_chunks(&mut self) {
        if let Some((_, pool)) = self.pool.as_mut() {
            for inst in &mut self.instances {
                for w in inst.writers.values_mut() {
                    w.finish_chunk(pool, &mut self.commits);
                }
            }
        }
    }

    /// Sends the queued commit entries (in frames under the size limit), the
    /// last frame carrying `flush` if given (sent even with no entries).
    fn commit(&mut self, flush: Option<u64>) {
        let Some((conn, _)) = self.pool.as_ref() else {
            self.commits.clear();
            return;
        };
        let conn = *conn;
        if self.commits.is_empty() && flush.is_none() {
            return;
        }
        let mut start = 0;
        let mut size = 0;
        for (i, c) in self.commits.iter().enumerate() {
            let n = c.encoded_len();
            if size + n > COMMIT_BUDGET && i > start {
                let args = wire::commit_data(&self.commits[start..i], None);
                self.link.send(conn, "CommitData", &args, true);
                start = i;
                size = 0;
            }
            size += n;
        }
        let args = wire::commit_data(&self.commits[start..], flush);
        self.link.send(conn, "CommitData", &args, true);
        self.commits.clear();
    }

    /// Writes the packets in `self.out` (encoder output of instance `i`)
    /// into their sequences' chunks. A sequence that meets a full buffer
    /// loses the rest of its packets here; the encoder is told, so the next
    /// packets restart the sequence with the loss marked.
    fn place(&mut self, i: usize, thread: Option<&ThreadInfo>, ctx: &mut Context<'_>) {
        if self.out.is_empty() {
            return;
        }
        let inst = &mut self.instances[i];
        let mut dropped_seq: Option<u32> = None;
        // Events dropped, and losses to mark again (theirs and carried ones).
        let (mut dropped_events, mut to_mark, mut dropped_samples) = (0u64, 0u64, 0u64);
        let mut drop_packet = |packet: &[u8]| {
            let (events, carried) = dropped(packet);
            dropped_events += events;
            to_mark += events + carried;
            dropped_samples += is_sample(packet) as u64;
        };
        let pool = self
            .pool
            .as_mut()
            .filter(|(c, _)| *c == inst.conn)
            .map(|(_, p)| p);
        let Some(pool) = pool else {
            // No shared memory for this connection yet: nothing can be sent.
            self.stats.events_dropped += count_events(&self.out);
            self.out.clear();
            return;
        };
        let (live, next) = (&mut self.live_writers, &mut self.next_writer);
        let commits = &mut self.commits;
        let link = &self.link;
        let half = pool.pages() / 2;
        let _ = wire::for_each_packet(&self.out, &mut self.scratch, |seq, packet| {
            if dropped_seq == Some(seq) {
                drop_packet(packet);
                return;
            }
            let w = inst.writers.entry(seq).or_insert_with(|| {
                let id = allocate_writer(live, next);
                link.send(
                    inst.conn,
                    "RegisterTraceWriter",
                    &wire::register_trace_writer(id, inst.target_buffer),
                    true,
                );
                Writer::new(id, inst.target_buffer)
            });
            if let Err(Full) = w.write_packet(pool, packet, commits) {
                dropped_seq = Some(seq);
                drop_packet(packet);
            }
            if half > 0 && commits.len() >= half {
                let args = wire::commit_data(commits, None);
                link.send(inst.conn, "CommitData", &args, true);
                commits.clear();
            }
        });
        let emulated_bytes: usize = self.commits.iter().map(ChunkToMove::encoded_len).sum();
        if emulated_bytes >= COMMIT_BUDGET / 2 && half == 0 {
            self.commit(None);
        }
        self.out.clear();
        self.stats.events_dropped += dropped_events;
        self.stats.samples_dropped += dropped_samples;
        if dropped_seq == Some(SAMPLES_SEQ) {
            // Its interned mappings, frames and stacks may be what was
            // lost: the samples sequence starts over (CLEARED, every entry
            // again), and with it the instance's other sequences.
            self.instances[i].encoder.clear_incremental_state();
        }
        if to_mark > 0 {
            if let Some(t) = thread {
                self.instances[i]
                    .encoder
                    .note_lost(ctx, t, to_mark, &mut self.out);
                self.out.clear();
            }
        }
    }
}

/// Whether `packet` is a CPU sample (`TracePacket.perf_sample`).
fn is_sample(packet: &[u8]) -> bool {
    wire::fields(packet).any(|f| matches!(f, Ok((66, _))))
}

/// The next writer id not in use (1..=32767, round robin).
fn allocate_writer(live: &mut HashSet<u16>, next: &mut u16) -> u16 {
    loop {
        let id = *next;
        *next = if *next >= 32767 { 1 } else { *next + 1 };
        if live.insert(id) {
            return id;
        }
    }
}

/// What dropping `packet` loses: (recorded events, loss count it was
/// carrying). A track event (field 11) is one event, except the encoder's
/// loss marker, which is no event of the program but carries the count of
/// earlier losses, to be marked again.
fn dropped(packet: &[u8]) -> (u64, u64) {
    let Some(te) = wire::fields(packet).find_map(|f| match f {
        Ok((11, v)) => Some(v.as_bytes()),
        _ => None,
    }) else {
        return (0, 0);
    };
    let mut marker = false;
    let mut count = 0;
    for f in wire::fields(te).flatten() {
        match f {
            (23, v) => marker = v.as_str() == LOST_EVENT_NAME,
            (4, v) => {
                for (n, a) in wire::fields(v.as_bytes()).flatten() {
                    if n == 3 {
                        count = a.as_u64();
                    }
                }
            }
            _ => {}
        }
    }
    if marker {
        (0, count)
    } else {
        (1, 0)
    }
}

fn count_events(stream: &[u8]) -> u64 {
    let mut n = 0;
    let _ = wire::for_each_packet(stream, &mut Vec::new(), |_, p| n += dropped(p).0);
    n
}

/// System tracing as one of the session's outputs: every item goes to each
/// live tracing session's encoder, whose packets go to `traced`'s shared
/// memory.
impl crate::output::Output for SystemFeed {
    /// A flush or stop the service asked for needs every ring drained.
    fn plan(
        &mut self,
        ctx: &mut Context<'_>,
        _asked: &crate::output::Asked,
    ) -> crate::output::Wants {
        crate::output::Wants {
            full: self.begin_cycle(ctx),
            ..Default::default()
        }
    }

    fn take(
        &mut self,
        ctx: &mut Context<'_>,
        item: crate::output::Item<'_>,
        _tally: &mut crate::output::Tally,
    ) {
        use crate::output::Item;
        match item {
            Item::Open | Item::Held => {}
            Item::Batch(_, batch) => self.batch(ctx, batch),
            Item::Lost(thread, count) => self.note_lost(ctx, thread, count),
            Item::ThreadDone(thread, pending) => {
                if pending > 0 {
                    self.note_lost(ctx, thread, pending);
                }
                self.thread_done(ctx, thread.seq_id);
            }
            Item::LostNoRing { now_ns, count } => self.note_lost_no_ring(ctx, now_ns, count),
            Item::Samples(view) => self.samples(ctx, view),
            Item::Tick => self.tick(ctx),
            Item::Close { now_ns } => self.finish(ctx, now_ns),
        }
    }

    fn end(
        &mut self,
        ctx: &mut Context<'_>,
        pass: &crate::output::Pass,
        _lost: u64,
        _tally: &mut crate::output::Tally,
    ) {
        if !pass.stopping {
            let now = ctx.cal.now_ns();
            self.end_cycle(ctx, now);
        }
    }

    fn activate_triggers(&mut self, names: &[String]) {
        SystemFeed::activate_triggers(self, names);
    }

    fn totals(&mut self, stats: &mut crate::stats::Stats) -> Option<std::io::Error> {
        stats.events_lost += self.stats().events_dropped;
        stats.cpu_samples_lost += self.stats().samples_dropped;
        None
    }
}
