//! The builder's CPU sampling options (the sampler itself is `sampling/`,
//! which knows nothing of the builder: the session hands it what they set).

use super::Builder;
use crate::sampling::CpuStacks;

impl Builder {
    /// Samples the call stack of every thread of the process `hz` times per
    /// second of CPU time it uses (0: off, the default), into the same
    /// trace as the slices: same pid, tid and clock. Threads started before
    /// the session and threads of other libraries are sampled too (found
    /// every 100 ms); a thread that exits keeps its samples.
    ///
    /// Needs the `cpu-sampling` feature and Linux on x86_64, and
    /// `perf_event_open` (allowed to a process sampling itself at the
    /// default `kernel.perf_event_paranoid` of 2; refused by Docker's
    /// default seccomp profile). Where it is not possible: one message on
    /// stderr, a trace without samples. Perfetto output: `PerfSample`
    /// packets, a "callstacks" track per thread and flame graphs in the UI.
    /// JSON output: the object form's `stackFrames` and `samples` (a JSON
    /// trace with sampling on is written in the object form). The kernel's
    /// rate limit (`kernel.perf_event_max_sample_rate`) bounds `hz`: asked
    /// above it, the sampler samples at the limit, says so once on stderr,
    /// and reports the rate in
    /// [`Stats::cpu_sampling_hz`](crate::Stats::cpu_sampling_hz). With
    /// [`system_tracing`](crate::Builder::system_tracing) the samples also
    /// go to each of Perfetto's tracing sessions (on a sequence of their
    /// own, interned per session). In flight-recorder mode
    /// ([`overwrite`](crate::Builder::overwrite)) the samples are held
    /// beside the records (in the memory budget) and each write-out gets
    /// those of the window it writes (from its oldest record on); samples
    /// that go before are counted in
    /// [`Stats::cpu_samples_aged_out`](crate::Stats::cpu_samples_aged_out);
    /// a capture ([`trigger`](crate::trigger),
    /// [`capture_slow_scopes`](crate::Builder::capture_slow_scopes)) holds
    /// the samples of its window, of every thread.
    ///
    /// Also `RINGTRACE_CPU_SAMPLING=<hz>` with
    /// [`init_from_env`](crate::init_from_env).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let _trace = ringtrace::builder()
    ///     .output("profile.pftrace")
    ///     .cpu_sampling(1000)
    ///     .start()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn cpu_sampling(mut self, hz: u32) -> Self {
        self.cpu_sampling.hz = hz;
        self
    }

    /// How sampled stacks are taken ([`CpuStacks::Auto`] by default).
    pub fn cpu_sampling_stacks(mut self, stacks: CpuStacks) -> Self {
        self.cpu_sampling.stacks = stacks;
        self
    }
}
