//! The JSON Object Format: `{"traceEvents":[` … events … `],
//! "displayTimeUnit":…,"stackFrames":{…},"samples":[…],"otherData":{…},
//! other keys…}` when the session asks for top-level data; events still
//! stream, the dictionary of stack frames and the global samples are kept
//! until the end (each distinct frame once). Unlike the bare array, a file
//! cut short in this form does not load. This module writes the file's
//! opening and closing bytes in either form and the top-level keys.

use super::text::{escape_into, value_into, Line};
use super::JsonEncoder;
use crate::record::args::ArgReader;
use std::fmt::Write as _;

/// A value as JSON text (for the object form's top-level data).
pub(crate) fn to_json_text(v: &dyn crate::TraceValue) -> String {
    let mut words = Vec::new();
    v.encode(&mut words);
    let mut s = Line::default();
    value_into(&mut s, &mut ArgReader::new(&words), 0);
    s.into_string()
}

impl JsonEncoder {
    /// The bytes that open the file.
    pub(super) fn file_head(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.phases.opts.object {
            b"{\"traceEvents\":[\n"
        } else {
            b"[\n"
        });
    }

    /// The bytes that close the file.
    pub(super) fn file_tail(&mut self, out: &mut Vec<u8>) {
        if !self.phases.opts.object {
            out.extend_from_slice(b"\n]\n");
            return;
        }
        let p = &self.phases;
        let mut s = String::from("\n]");
        if let Some(u) = p.opts.display_time_unit {
            let _ = write!(s, ",\n\"displayTimeUnit\":\"{u}\"");
        }
        if !p.frames_text.is_empty() {
            let _ = write!(s, ",\n\"stackFrames\":{{{}}}", p.frames_text);
        }
        if !p.samples_text.is_empty() {
            let _ = write!(s, ",\n\"samples\":[{}]", p.samples_text);
        }
        if !p.opts.other_data.is_empty() {
            s.push_str(",\n\"otherData\":{");
            for (i, (k, v)) in p.opts.other_data.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                escape_into(&mut s, k);
                s.push(':');
                s.push_str(v);
            }
            s.push('}');
        }
        for (k, v) in &p.opts.metadata {
            s.push_str(",\n");
            escape_into(&mut s, k);
            s.push(':');
            s.push_str(v);
        }
        s.push_str("}\n");
        out.extend_from_slice(s.as_bytes());
    }

    /// Interns a stack of frames (rootmost first); returns the leaf's id.
    pub(super) fn intern_frames<'s>(
        &mut self,
        frames: impl Iterator<Item = (&'s str, &'s str)>,
    ) -> u64 {
        let mut parent = 0;
        for (name, cat) in frames {
            let key = (parent, name.to_string(), cat.to_string());
            parent = match self.phases.frames.get(&key) {
                Some(&id) => id,
                None => {
                    let id = self.phases.frames.len() as u64 + 1;
                    let t = &mut self.phases.frames_text;
                    if !t.is_empty() {
                        t.push(',');
                    }
                    let _ = write!(t, "\n\"{id}\":{{\"name\":");
                    escape_into(t, name);
                    t.push_str(",\"category\":");
                    escape_into(t, cat);
                    if parent != 0 {
                        let _ = write!(t, ",\"parent\":\"{parent}\"");
                    }
                    t.push('}');
                    self.phases.frames.insert(key, id);
                    id
                }
            };
        }
        parent
    }
}
