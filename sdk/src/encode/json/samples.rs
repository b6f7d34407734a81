//! CPU stack samples in the JSON Object Format: each distinct frame once in
//! the `stackFrames` dictionary (name: the function, else the file and the
//! offset; category: the file; parent: its caller's frame), each sample an
//! entry of `samples` (`tid`, `cpu`, `ts` in microseconds on the slices'
//! clock, `sf` its innermost frame, `weight` 1). Kept with the object
//! form's other top-level data and written when the file ends; a session
//! with sampling on writes JSON in the object form.

use super::text::{escape_into, micros, Line};
use super::JsonEncoder;
use crate::sampling::SampleView;
use std::fmt::Write as _;

/// The `name` of the sampling event on each entry of `samples`.
const SAMPLE_NAME: &str = "cpu-clock";

impl JsonEncoder {
    pub(super) fn write_samples(&mut self, view: &SampleView<'_>) {
        let t = view.tables;
        for s in view.samples {
            let Some(stack) = (s.callstack as usize)
                .checked_sub(1)
                .and_then(|i| t.callstacks.get(i))
            else {
                continue;
            };
            let frames: Vec<(String, String)> = stack
                .iter()
                .filter_map(|&f| t.frames.get((f as usize).checked_sub(1)?))
                .map(|f| {
                    let map = (f.mapping as usize)
                        .checked_sub(1)
                        .and_then(|i| t.mappings.get(i));
                    let file = map
                        .map(|m| m.path.rsplit('/').next().unwrap_or(&m.path))
                        .unwrap_or("[unknown]");
                    let name = match (f.name as usize)
                        .checked_sub(1)
                        .and_then(|i| t.names.get(i))
                    {
                        Some(n) => n.clone(),
                        None => format!("{file}+{:#x}", f.rel_pc),
                    };
                    (name, file.to_string())
                })
                .collect();
            let sf = self.intern_frames(frames.iter().map(|(n, c)| (n.as_str(), c.as_str())));
            let out = &mut self.phases.samples_text;
            if !out.is_empty() {
                out.push(',');
            }
            let mut ts = Line::default();
            micros(&mut ts, s.ts_ns);
            let _ = write!(
                out,
                "\n{{\"cpu\":{},\"tid\":{},\"ts\":{},\"name\":",
                s.cpu,
                s.tid,
                ts.into_string()
            );
            escape_into(out, SAMPLE_NAME);
            let _ = write!(out, ",\"sf\":{sf},\"weight\":1}}");
            self.stats.events += 1;
        }
    }
}
