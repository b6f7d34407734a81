//! Events that tie places together: async ranges, flows, contexts.

use super::{field, op, phase, write_now, Category, Event, Fields, Id};
use std::fmt;
use std::marker::PhantomData;

/// An async range begun with [`Category::async_begin`]: records its steps
/// and its end with the same category, id and (for the end) name, as the
/// format requires for the `n` / `e` events to match the `b`.
///
/// # Examples
///
/// ```
/// use ringtrace::events::{Category, Id};
/// static NET: Category = Category::new("net");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let req = NET.async_begin("request", Id::local(1)).emit();
/// if let Some(id) = req.id() {
///     assert_eq!(id, Id::local(1)); // recorded: the category is on
/// }
/// req.instant("headers received").arg("status", 200).emit();
/// std::thread::spawn(move || req.end_with().arg("bytes", 512).emit()).join().unwrap();
/// ```
#[must_use = "an async range ends only when `end` is called"]
pub struct AsyncRange {
    pub(super) site: u32,
    /// None when the begin was not recorded (category off).
    pub(super) id: Option<Id>,
    /// The begin's encoded NAME field, for the end.
    pub(super) name: Option<Fields>,
}

impl fmt::Debug for AsyncRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRange").field("id", &self.id).finish()
    }
}

impl Drop for AsyncRange {
    fn drop(&mut self) {
        if let Some(f) = self.name.take() {
            f.give();
        }
    }
}

impl AsyncRange {
    /// The range's id (None if its begin was not recorded).
    pub fn id(&self) -> Option<Id> {
        self.id
    }

    /// An instant inside the range (`n`) named `name`.
    pub fn instant(&self, name: &str) -> Event<phase::Async> {
        let fields = self.id.map(|id| {
            let mut f = Fields::take();
            f.str(field::NAME, name);
            f.id(id);
            f
        });
        Event {
            fields,
            site: self.site,
            op: op::ASYNC_INSTANT,
            track: None,
            _phase: PhantomData,
        }
    }

    /// Ends the range now (`e`).
    pub fn end(self) {
        self.end_with().emit()
    }

    /// The end of the range (`e`), to give it args before [`Event::emit`].
    pub fn end_with(mut self) -> Event<phase::Async> {
        let fields = match (self.id, self.name.take()) {
            (Some(id), Some(mut f)) => {
                f.id(id);
                Some(f)
            }
            (_, f) => {
                if let Some(f) = f {
                    f.give();
                }
                None
            }
        };
        Event {
            fields,
            site: self.site,
            op: op::ASYNC_END,
            track: None,
            _phase: PhantomData,
        }
    }
}

/// A flow: arrows between slices, across threads (`s`, `t`, `f`). All its
/// events share a category, name and id, as the format requires. `Copy` and
/// `Send`: pass it to the thread that continues the work.
///
/// The format binds `s` and `t` to the slice enclosing them on their thread,
/// and `f` to the next slice that begins on its thread (or the enclosing
/// one, with [`Flow::end_enclosing`]).
///
/// # Examples
///
/// ```
/// static JOBS: ringtrace::events::Category = ringtrace::events::Category::new("jobs");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let flow = JOBS.flow("job", 17);
/// {
///     ringtrace::trace_scope!("submit");
///     flow.start();
/// }
/// std::thread::spawn(move || {
///     ringtrace::trace_scope!("run");
///     flow.end_enclosing();
/// }).join().unwrap();
/// ```
#[derive(Clone, Copy)]
pub struct Flow {
    pub(super) cat: &'static Category,
    pub(super) name: &'static str,
    pub(super) id: u64,
}

impl fmt::Debug for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flow")
            .field("category", &self.cat.name())
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl Flow {
    /// The flow's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The flow starts in the slice enclosing this point (`s`).
    pub fn start(&self) {
        self.emit(op::FLOW_START, false)
    }

    /// The flow passes through the slice enclosing this point (`t`).
    pub fn step(&self) {
        self.emit(op::FLOW_STEP, false)
    }

    /// The flow ends in the next slice that begins on this thread (`f`).
    pub fn end(&self) {
        self.emit(op::FLOW_END, false)
    }

    /// The flow ends in the slice enclosing this point (`f` with `"bp":"e"`).
    pub fn end_enclosing(&self) {
        self.emit(op::FLOW_END, true)
    }

    fn emit(&self, op: u8, enclosing: bool) {
        if self.cat.is_enabled() {
            write_now(self.cat.site.id(), op, |f| {
                f.str(field::NAME, self.name);
                f.uint(field::ID, self.id);
                if enclosing {
                    f.flag(field::BIND_ENCLOSING);
                }
            });
        }
    }
}

/// Leaves a context entered with [`Category::context`] when dropped. `!Send`:
/// a context is entered and left on one thread.
#[must_use = "the context is left when the guard is dropped"]
pub struct ContextGuard {
    pub(super) cat: &'static Category,
    pub(super) name: &'static str,
    pub(super) id: Id,
    pub(super) _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for ContextGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextGuard")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        self.cat.context_leave(self.name, self.id);
    }
}
