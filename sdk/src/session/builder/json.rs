//! The options of the Chrome JSON output.

#![forbid(unsafe_code)]

use super::Builder;

/// How the Chrome JSON output writes scopes ([`Builder::json_scopes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonScopes {
    /// One complete (`X`) event per scope, written when it ends, with `dur`
    /// (and `tts`/`tdur` when thread time is recorded). Half the size of
    /// `B`/`E`; the default.
    #[default]
    Complete,
    /// A `B` event when a scope begins and an `E` when it ends (each with
    /// `tts` when thread time is recorded). A crash keeps the begins of the
    /// scopes still open. Complete events given explicit times are written
    /// as `B`/`E` pairs too: a file never mixes `X` with `B`/`E`.
    BeginEnd,
}

/// The unit a JSON trace viewer displays times in (`displayTimeUnit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisplayTimeUnit {
    /// Milliseconds (`"displayTimeUnit": "ms"`).
    Ms,
    /// Nanoseconds (`"displayTimeUnit": "ns"`).
    Ns,
}

impl Builder {
    /// Chrome JSON: write scopes as complete `X` events (default) or as
    /// `B`/`E` pairs. One file never mixes the two.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::JsonScopes;
    /// let path = std::env::temp_dir().join("ringtrace-doc-be.json");
    /// let _trace = ringtrace::builder()
    ///     .output(&path)
    ///     .json_scopes(JsonScopes::BeginEnd)
    ///     .start()?;
    /// ringtrace::trace_scope!("work"); // {"ph":"B",...} then {"ph":"E",...}
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn json_scopes(mut self, scopes: JsonScopes) -> Self {
        self.json.scopes = match scopes {
            JsonScopes::Complete => crate::encode::json::ScopeForm::Complete,
            JsonScopes::BeginEnd => crate::encode::json::ScopeForm::BeginEnd,
        };
        self
    }

    /// Chrome JSON: write the JSON Object Format
    /// (`{"traceEvents":[...], ...}`) instead of the bare array. Implied by
    /// [`json_display_time_unit`](Builder::json_display_time_unit),
    /// [`json_other_data`](Builder::json_other_data) and
    /// [`json_metadata`](Builder::json_metadata). The object form is
    /// completed when the session stops; unlike the default bare array, a
    /// file cut short by a crash or kill does not load. Stack frames go to
    /// its `stackFrames` dictionary and global samples to its `samples`.
    pub fn json_object_form(mut self, on: bool) -> Self {
        self.json.object = on;
        self
    }

    /// Chrome JSON: `displayTimeUnit` ("ms" or "ns"). Selects the object form.
    pub fn json_display_time_unit(mut self, unit: DisplayTimeUnit) -> Self {
        self.json.display_time_unit = Some(match unit {
            DisplayTimeUnit::Ms => "ms",
            DisplayTimeUnit::Ns => "ns",
        });
        self.json.object = true;
        self
    }

    /// Chrome JSON: an entry of the top-level `otherData` object (shown by
    /// viewers as the trace's metadata). Selects the object form.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-other-data.json");
    /// let _trace = ringtrace::builder()
    ///     .output(&path)
    ///     .json_other_data("version", "My Application v1.0")
    ///     .json_metadata("metadata", std::collections::BTreeMap::from([("run", 42)]))
    ///     .start()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn json_other_data(mut self, key: &str, value: impl crate::TraceValue) -> Self {
        self.json
            .other_data
            .push((key.to_string(), crate::encode::json::to_json_text(&value)));
        self.json.object = true;
        self
    }

    /// Chrome JSON: any other top-level key of the object form (viewers keep
    /// unknown keys as trace metadata; Perfetto imports a `metadata` object
    /// into its metadata table). Not `traceEvents`, `displayTimeUnit`,
    /// `stackFrames`, `samples` or `otherData`, which ringtrace writes
    /// itself. Selects the object form.
    pub fn json_metadata(mut self, key: &str, value: impl crate::TraceValue) -> Self {
        const RESERVED: [&str; 5] = [
            "traceEvents",
            "displayTimeUnit",
            "stackFrames",
            "samples",
            "otherData",
        ];
        if RESERVED.contains(&key) || self.json.metadata.iter().any(|(k, _)| k == key) {
            self.json_key_error = Some(key.to_string());
        } else {
            self.json
                .metadata
                .push((key.to_string(), crate::encode::json::to_json_text(&value)));
        }
        self.json.object = true;
        self
    }
}
