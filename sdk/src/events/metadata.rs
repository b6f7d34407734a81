//! Events without a category: clock sync, thread and process metadata,
//! global samples, log messages.

use super::{field, op, write_now, LogLevel, Stack};
use crate::record::callsite::Callsite;
use std::cell::RefCell;
use std::fmt;

/// A clock sync marker received (`c`, `name: "clock_sync"`): `sync_id`
/// identifies the marker across the agents that record it. JSON only.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::events::clock_sync("guid1");
/// let issued = ringtrace::trace_clock_ns();
/// ringtrace::events::clock_sync_issued("guid2", issued);
/// ```
pub fn clock_sync(sync_id: &str) {
    write_now(0, op::CLOCK_SYNC, |f| f.str(field::SYNC_ID, sync_id));
}

/// A clock sync marker this process issued at `issue_ts_ns` (trace clock)
/// and the receiver has now recorded (`args.issue_ts`).
pub fn clock_sync_issued(sync_id: &str, issue_ts_ns: u64) {
    write_now(0, op::CLOCK_SYNC, |f| {
        f.str(field::SYNC_ID, sync_id);
        f.uint(field::ISSUE_TS, issue_ts_ns);
    });
}

/// Names the calling thread in the trace (`M thread_name`; the thread's
/// descriptor in Perfetto), overriding its `std::thread` name from now on.
/// Recorded only while a session records.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// std::thread::spawn(|| {
///     ringtrace::events::set_thread_name("io worker");
///     ringtrace::events::set_thread_sort_index(-1); // above the other threads
///     ringtrace::trace_instant!("started");
/// })
/// .join()
/// .unwrap();
/// ```
pub fn set_thread_name(name: &str) {
    write_now(0, op::THREAD_NAME, |f| f.str(field::NAME, name));
}

/// Where the calling thread sorts among its process's threads (`M
/// thread_sort_index`; `legacy_sort_index` and the track's
/// `sibling_order_rank` in Perfetto). Lower is higher up.
pub fn set_thread_sort_index(index: i32) {
    write_now(0, op::THREAD_SORT_INDEX, |f| {
        f.int(field::SORT_INDEX, index as i64)
    });
}

/// Renames the process from now on (`M process_name`; the process
/// descriptor in Perfetto). [`Builder::process_name`](crate::Builder::process_name)
/// sets it from the start. Recorded only while a session records.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::events::set_process_name("renderer");
/// ringtrace::events::set_process_labels(&["gpu", "tab 3"]);
/// ringtrace::events::set_process_sort_index(2);
/// ```
pub fn set_process_name(name: &str) {
    write_now(0, op::PROCESS_NAME, |f| f.str(field::NAME, name));
}

/// Extra labels of the process (`M process_labels`, comma-joined;
/// `process_labels` of the process descriptor in Perfetto).
pub fn set_process_labels(labels: &[&str]) {
    write_now(0, op::PROCESS_LABELS, |f| f.value(field::LABELS, &labels))
}

/// Where the process sorts among processes (`M process_sort_index`;
/// `legacy_sort_index` and `sibling_order_rank` in Perfetto).
pub fn set_process_sort_index(index: i32) {
    write_now(0, op::PROCESS_SORT_INDEX, |f| {
        f.int(field::SORT_INDEX, index as i64)
    });
}

/// A global sample (the JSON object form's top-level `samples`): OS-level
/// sampling data, e.g. a CPU counter sample, with its `stack`, `weight`
/// and optional `cpu`, on the calling thread. In the bare-array form, which
/// has no `samples` list, it is written as a `P` event with the same fields
/// as args. JSON only.
///
/// # Examples
///
/// ```
/// use ringtrace::events::Stack;
/// let path = std::env::temp_dir().join("ringtrace-doc-global-sample.json");
/// let _trace = ringtrace::builder().output(&path).json_object_form(true).start()?;
/// ringtrace::events::global_sample("cpu-clock", 1, Some(0), Stack::Addresses(&[0x401000, 0x401234]));
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn global_sample(name: &str, weight: u64, cpu: Option<u32>, stack: Stack<'_>) {
    write_now(0, op::GLOBAL_SAMPLE, |f| {
        f.str(field::NAME, name);
        f.uint(field::WEIGHT, weight);
        if let Some(cpu) = cpu {
            f.uint(field::CPU, cpu as u64);
        }
        f.stack(false, stack);
    });
}

thread_local! {
    static LOG_BUF: RefCell<String> = const { RefCell::new(String::new()) };
}

/// What [`trace_log!`](crate::trace_log) and the `log` bridge call. The
/// message is formatted into a reused per-thread buffer; a message without
/// arguments is not formatted; in a thread-local destructor (the buffer is
/// gone) or in a log written while formatting another, into a local `String`.
#[doc(hidden)]
pub fn log(site: &'static Callsite, level: LogLevel, message: fmt::Arguments<'_>) {
    if !cfg!(feature = "enable") {
        return;
    }
    if let Some(text) = message.as_str() {
        return log_str(site, level, text);
    }
    let done = LOG_BUF.try_with(|b| {
        let Ok(mut buf) = b.try_borrow_mut() else {
            return false; // a log while formatting a log
        };
        buf.clear();
        let _ = fmt::write(&mut *buf, message);
        log_str(site, level, &buf);
        if buf.capacity() > 1 << 16 {
            *buf = String::new();
        }
        true
    });
    if done != Ok(true) {
        log_str(site, level, &message.to_string());
    }
}

fn log_str(site: &'static Callsite, level: LogLevel, message: &str) {
    write_now(site.id(), op::LOG, |f| {
        f.uint(field::LEVEL, level as u64);
        f.str(field::MESSAGE, message);
    });
}
