//! Packets into chunks: the shared memory ABI's pages and chunk headers, and
//! the writers (one per packet sequence) that pack packets into chunks,
//! fragmenting those larger than a chunk.
//!
//! Every page is used with one chunk (layout Div1). Only the flusher thread
//! writes: it acquires a free page, fills its chunk, marks it Complete and
//! queues a `ChunksToMove` entry; traced copies and frees it when the
//! CommitData arrives. Without shared memory (TCP) the same chunk bytes
//! travel inside the CommitData instead.
//!
//! The page headers are traced's to write too: whatever they hold is
//! untrusted. A chunk of ours that traced no longer shows as BeingWritten
//! when we complete it is not ours any more: not committed, counted lost.

#![forbid(unsafe_code)]

use super::shm::SharedMemory;
use super::wire::ChunkToMove;
use crate::encode::protowire::{varint, varint_len};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Page header bytes (the bitmap word and a reserved word).
const PAGE_HEADER: usize = 8;
/// Chunk header bytes (chunk id, writer id, packet count and flags).
const CHUNK_HEADER: usize = 8;
/// Bitmap layout Div1 (bits 28..30): one chunk per page.
const LAYOUT_DIV1: u32 = 1 << 28;
const STATE_MASK: u32 = 3;
const STATE_FREE: u32 = 0;
const STATE_BEING_WRITTEN: u32 = 1;
const STATE_COMPLETE: u32 = 3;
/// Chunk flags (bits 10..15 of the packets word).
pub(crate) const FIRST_PACKET_CONTINUES: u16 = 1;
pub(crate) const LAST_PACKET_CONTINUES: u16 = 2;
/// Packets per chunk at most (the count field has 10 bits; the SDK stops at 1022).
const MAX_PACKETS: u16 = 1022;
/// A chunk with less room than this is closed rather than given a fragment.
const MIN_FRAGMENT_ROOM: usize = 12;
/// Bytes of a fragment's length prefix (a redundant 4-byte varint).
const FRAGMENT_PREFIX: usize = 4;
/// Packets larger than this are dropped (traced's packet limit is 2^28 - 1).
pub(crate) const MAX_PACKET: usize = 16 << 20;

/// Where chunks live.
pub(crate) enum Memory {
    /// traced's shared memory buffer (Unix socket).
    Shared(Arc<SharedMemory>),
    /// No shared memory (TCP, vsock): chunks are sent in CommitData.
    Emulated { page_size: usize },
}

/// Hands out chunks and turns finished ones into commit entries.
pub(crate) struct ChunkPool {
    mem: Memory,
    next_page: usize,
    /// Chunks we were writing that traced took back (their state changed
    /// under us): their packets are lost.
    pub(crate) chunks_taken_back: u64,
}

/// A chunk being written (the page it holds in shared memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(u32);

impl ChunkPool {
    pub(crate) fn new(mem: Memory) -> ChunkPool {
        ChunkPool {
            mem,
            next_page: 0,
            chunks_taken_back: 0,
        }
    }

    pub(crate) fn page_size(&self) -> usize {
        match &self.mem {
            Memory::Shared(m) => m.page_size(),
            Memory::Emulated { page_size } => *page_size,
        }
    }

    /// Payload bytes of one chunk.
    pub(crate) fn capacity(&self) -> usize {
        ((self.page_size() - PAGE_HEADER) & !3) - CHUNK_HEADER
    }

    /// Pages in the buffer (0 without shared memory: unbounded).
    pub(crate) fn pages(&self) -> usize {
        match &self.mem {
            Memory::Shared(m) => m.pages(),
            Memory::Emulated { .. } => 0,
        }
    }

    /// Takes a free chunk, or None if every page is in use.
    pub(crate) fn acquire(&mut self) -> Option<Slot> {
        let m = match &self.mem {
            Memory::Shared(m) => m,
            Memory::Emulated { .. } => return Some(Slot(0)),
        };
        let pages = m.pages();
        for i in 0..pages {
            let page = (self.next_page + i) % pages;
            let bitmap = m.word(page * m.page_size());
            let mut cur = bitmap.load(Ordering::Acquire);
            if cur == 0 {
                // Partition the free page: Div1, its chunk Free.
                match bitmap.compare_exchange(0, LAYOUT_DIV1, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => cur = LAYOUT_DIV1,
                    Err(now) => cur = now,
                }
            }
            if cur == LAYOUT_DIV1 | STATE_FREE
                && bitmap
                    .compare_exchange(
                        cur,
                        LAYOUT_DIV1 | STATE_BEING_WRITTEN,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                self.next_page = (page + 1) % pages;
                return Some(Slot(page as u32));
            }
        }
        None
    }

    /// Publishes a chunk acquired as `slot`: its header and `payload`, then
    /// Complete. Returns the commit entry naming it; None if traced took
    /// the chunk back meanwhile (its state is no longer BeingWritten:
    /// counted in `chunks_taken_back`, the chunk is not committed).
    pub(crate) fn complete(
        &mut self,
        slot: Slot,
        header: ChunkHeader,
        payload: &[u8],
        target_buffer: u32,
    ) -> Option<ChunkToMove> {
        debug_assert!(payload.len() <= self.capacity());
        match &self.mem {
            Memory::Emulated { .. } => {
                let mut data = Vec::with_capacity(CHUNK_HEADER + payload.len());
                data.extend_from_slice(&header.chunk_id.to_le_bytes());
                data.extend_from_slice(&header.writer_id.to_le_bytes());
                data.extend_from_slice(&header.packets_word().to_le_bytes());
                data.extend_from_slice(payload);
                Some(ChunkToMove {
                    page: 0,
                    chunk: 0,
                    target_buffer,
                    data: Some(data),
                })
            }
            Memory::Shared(m) => {
                let page = slot.0 as usize * m.page_size();
                let chunk = page + PAGE_HEADER;
                let body = chunk + CHUNK_HEADER;
                for (i, w) in payload.chunks(4).enumerate() {
                    let mut word = [0u8; 4];
                    word[..w.len()].copy_from_slice(w);
                    m.word(body + i * 4)
                        .store(u32::from_le_bytes(word), Ordering::Relaxed);
                }
                m.word(chunk).store(header.chunk_id, Ordering::Relaxed);
                m.half(chunk + 4).store(header.writer_id, Ordering::Relaxed);
                m.half(chunk + 6)
                    .store(header.packets_word(), Ordering::Release);
                let bitmap = m.word(page);
                // A sane traced never changes a BeingWritten chunk; the loop
                // only guards against a spurious view of the word. Any other
                // state (traced freed the page, or wrote anything else
                // there) means the chunk is no longer ours.
                let mut completed = false;
                for _ in 0..64 {
                    let cur = bitmap.load(Ordering::Acquire);
                    if cur & STATE_MASK != STATE_BEING_WRITTEN {
                        break;
                    }
                    let next = (cur & !STATE_MASK) | STATE_COMPLETE;
                    if bitmap
                        .compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        completed = true;
                        break;
                    }
                }
                if !completed {
                    self.chunks_taken_back += 1;
                    return None;
                }
                Some(ChunkToMove {
                    page: slot.0,
                    chunk: 0,
                    target_buffer,
                    data: None,
                })
            }
        }
    }
}

/// The header fields of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    pub(crate) chunk_id: u32,
    pub(crate) writer_id: u16,
    pub(crate) count: u16,
    pub(crate) flags: u16,
}

impl ChunkHeader {
    fn packets_word(&self) -> u16 {
        self.count | (self.flags << 10)
    }
}

/// The SMB had no free chunk: the packet was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

struct OpenChunk {
    slot: Slot,
    chunk_id: u32,
    payload: Vec<u8>,
    count: u16,
    flags: u16,
}

/// One packet sequence's writer: its id, its chunk ids, its open chunk.
pub(crate) struct Writer {
    pub(crate) id: u16,
    pub(crate) target_buffer: u32,
    next_chunk_id: u32,
    open: Option<OpenChunk>,
}

impl Writer {
    pub(crate) fn new(id: u16, target_buffer: u32) -> Writer {
        Writer {
            id,
            target_buffer,
            next_chunk_id: 0,
            open: None,
        }
    }

    fn take_chunk(&mut self, slot: Slot) -> OpenChunk {
        let chunk_id = self.next_chunk_id;
        self.next_chunk_id = self.next_chunk_id.wrapping_add(1);
        OpenChunk {
            slot,
            chunk_id,
            payload: Vec::new(),
            count: 0,
            flags: 0,
        }
    }

    fn close(&mut self, pool: &mut ChunkPool, c: OpenChunk, commits: &mut Vec<ChunkToMove>) {
        let header = ChunkHeader {
            chunk_id: c.chunk_id,
            writer_id: self.id,
            count: c.count,
            flags: c.flags,
        };
        // A chunk traced took back is lost with its packets (counted).
        commits.extend(pool.complete(c.slot, header, &c.payload, self.target_buffer));
    }

    /// Appends one packet, opening (and fragmenting over) as many chunks as
    /// it needs. With no free chunk for all of it, nothing of it is written.
    pub(crate) fn write_packet(
        &mut self,
        pool: &mut ChunkPool,
        packet: &[u8],
        commits: &mut Vec<ChunkToMove>,
    ) -> Result<(), Full> {
        let cap = pool.capacity();
        let whole = varint_len(packet.len() as u64) + packet.len();
        if packet.len() > MAX_PACKET {
            return Err(Full);
        }
        // The open chunk is full (by room or count): close it.
        if let Some(c) = &self.open {
            if c.count >= MAX_PACKETS
                || (cap - c.payload.len() < MIN_FRAGMENT_ROOM && cap - c.payload.len() < whole)
            {
                let c = self.open.take().unwrap();
                self.close(pool, c, commits);
            }
        }
        if let Some(c) = &mut self.open {
            if cap - c.payload.len() >= whole {
                varint(&mut c.payload, packet.len() as u64);
                c.payload.extend_from_slice(packet);
                c.count += 1;
                return Ok(());
            }
        }
        if self.open.is_none() && whole <= cap {
            let slot = pool.acquire().ok_or(Full)?;
            let mut c = self.take_chunk(slot);
            varint(&mut c.payload, packet.len() as u64);
            c.payload.extend_from_slice(packet);
            c.count = 1;
            self.open = Some(c);
            return Ok(());
        }
        // Fragments: the first in the open chunk's room (if any), then whole
        // chunks; acquire them all before writing any.
        let first_room = self
            .open
            .as_ref()
            .map_or(0, |c| cap - c.payload.len() - FRAGMENT_PREFIX);
        let per_chunk = cap - FRAGMENT_PREFIX;
        let rest = packet.len() - first_room.min(packet.len());
        let needed = rest.div_ceil(per_chunk);
        let mut slots = Vec::with_capacity(needed);
        for _ in 0..needed {
            match pool.acquire() {
                Some(s) => slots.push(s),
                None => {
                    // Acquired chunks must be committed: empty ones are harmless.
                    for s in slots {
                        let c = self.take_chunk(s);
                        self.close(pool, c, commits);
                    }
                    return Err(Full);
                }
            }
        }
        let mut data = packet;
        let mut prev_continues = false;
        if let Some(mut c) = self.open.take() {
            let (head, tail) = data.split_at(first_room);
            fragment_prefix(&mut c.payload, head.len());
            c.payload.extend_from_slice(head);
            c.count += 1;
            c.flags |= LAST_PACKET_CONTINUES;
            self.close(pool, c, commits);
            data = tail;
            prev_continues = true;
        }
        let n = slots.len();
        for (i, s) in slots.into_iter().enumerate() {
            let mut c = self.take_chunk(s);
            let take = data.len().min(per_chunk);
            let (head, tail) = data.split_at(take);
            fragment_prefix(&mut c.payload, head.len());
            c.payload.extend_from_slice(head);
            c.count = 1;
            if prev_continues {
                c.flags |= FIRST_PACKET_CONTINUES;
            }
            data = tail;
            prev_continues = true;
            if i + 1 < n {
                c.flags |= LAST_PACKET_CONTINUES;
                self.close(pool, c, commits);
            } else {
                self.open = Some(c);
            }
        }
        Ok(())
    }

    /// Completes the open chunk, if any (flush, end of a cycle, stop).
    pub(crate) fn finish_chunk(&mut self, pool: &mut ChunkPool, commits: &mut Vec<ChunkToMove>) {
        if let Some(c) = self.open.take() {
            self.close(pool, c, commits);
        }
    }
}

/// A fragment's length as a 4-byte varint (redundant encoding is allowed).
fn fragment_prefix(buf: &mut Vec<u8>, len: usize) {
    let len = len as u32;
    buf.extend_from_slice(&[
        (len & 0x7f) as u8 | 0x80,
        ((len >> 7) & 0x7f) as u8 | 0x80,
        ((len >> 14) & 0x7f) as u8 | 0x80,
        ((len >> 21) & 0x7f) as u8,
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reassembles the packets of emulated chunks as traced does.
    fn reassemble(commits: &[ChunkToMove]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut partial: Option<Vec<u8>> = None;
        for (next_id, c) in commits.iter().enumerate() {
            let d = c.data.as_ref().unwrap();
            let id = u32::from_le_bytes(d[0..4].try_into().unwrap());
            assert_eq!(id as usize, next_id, "chunk ids are consecutive");
            let word = u16::from_le_bytes(d[6..8].try_into().unwrap());
            let (count, flags) = (word & 0x3ff, word >> 10);
            let mut pos = 8;
            for i in 0..count {
                let mut p = pos;
                let len = crate::system::wire::read_varint(d, &mut p).unwrap() as usize;
                let bytes = &d[p..p + len];
                pos = p + len;
                let first = i == 0 && flags & FIRST_PACKET_CONTINUES != 0;
                let last = i + 1 == count && flags & LAST_PACKET_CONTINUES != 0;
                let mut buf = if first {
                    partial.take().expect("a continuation")
                } else {
                    Vec::new()
                };
                buf.extend_from_slice(bytes);
                if last {
                    partial = Some(buf);
                } else {
                    out.push(buf);
                }
            }
        }
        assert!(partial.is_none());
        out
    }

    #[test]
    fn a_chunk_whose_state_traced_changed_is_not_committed_and_no_panic() {
        let shm = Arc::new(SharedMemory::sealed_for_test());
        let mut pool = ChunkPool::new(Memory::Shared(shm.clone()));
        let mut w = Writer::new(1, 1);
        let mut commits = Vec::new();
        // What traced may write over our BeingWritten chunk's page header:
        // the page freed, the chunk Free, Complete, or any word at all.
        let edits = [0, LAYOUT_DIV1, LAYOUT_DIV1 | STATE_COMPLETE, 0xffff_fffe, 2];
        for (i, &edit) in edits.iter().enumerate() {
            w.write_packet(&mut pool, &[1, 2, 3], &mut commits).unwrap();
            let page = w.open.as_ref().unwrap().slot.0 as usize;
            let bitmap = shm.word(page * shm.page_size());
            assert_eq!(
                bitmap.load(Ordering::Relaxed),
                LAYOUT_DIV1 | STATE_BEING_WRITTEN
            );
            bitmap.store(edit, Ordering::Relaxed);
            w.finish_chunk(&mut pool, &mut commits);
            assert!(
                commits.is_empty(),
                "edit {edit:#x}: not ours, not committed"
            );
            assert_eq!(pool.chunks_taken_back, i as u64 + 1);
            // traced's word is left as it wrote it.
            assert_eq!(bitmap.load(Ordering::Relaxed), edit);
        }
        // Left alone, a chunk is completed and committed.
        w.write_packet(&mut pool, &[1, 2, 3], &mut commits).unwrap();
        let page = w.open.as_ref().unwrap().slot.0;
        w.finish_chunk(&mut pool, &mut commits);
        assert_eq!(commits.len(), 1);
        assert_eq!(commits[0].page, page);
        let word = shm.word(page as usize * shm.page_size());
        assert_eq!(word.load(Ordering::Relaxed), LAYOUT_DIV1 | STATE_COMPLETE);
        assert_eq!(pool.chunks_taken_back, edits.len() as u64);
    }

    #[test]
    fn packets_larger_than_a_chunk_are_fragmented_and_reassembled() {
        let mut pool = ChunkPool::new(Memory::Emulated { page_size: 4096 });
        let mut w = Writer::new(1, 1);
        let mut commits = Vec::new();
        let packets: Vec<Vec<u8>> = [10usize, 4000, 9000, 3, 4080, 1]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|b| (b + i) as u8).collect())
            .collect();
        for p in &packets {
            w.write_packet(&mut pool, p, &mut commits).unwrap();
        }
        w.finish_chunk(&mut pool, &mut commits);
        assert!(commits
            .iter()
            .all(|c| c.data.as_ref().unwrap().len() <= 4088));
        assert_eq!(reassemble(&commits), packets);
    }
}
