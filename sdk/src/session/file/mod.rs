//! The file room: a file the session writes and everything about its
//! bytes. [`File`] (an encoder, its sink, what of it is in the file),
//! [`Target`] and [`Formats`] (making one), `create` (private files, names
//! the session picks made new), `sink` (where bytes go, laid out so a kill
//! leaves whole events), `guard` (what may still go into the session's own
//! file: a hard limit, failed writes counted), `parts` (the disk bound's
//! numbered parts).

#![forbid(unsafe_code)]

pub(crate) mod create;
pub(crate) mod guard;
pub(crate) mod parts;
pub(crate) mod sink;
mod target;

pub(crate) use target::{write_if_full, write_out, File, Formats, Target, WRITE_AT};
