//! `RingtraceLayer`: ringtrace as a `tracing_subscriber::Layer`, span state in
//! the registry's extensions of each span.

use super::bridge::{self, SpanData, SpanStore};
use super::sealed;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The `tracing` layer that records into the ringtrace session started by
/// [`LayerBuilder::build`](crate::LayerBuilder::build). Add it to a `tracing_subscriber::registry()`,
/// with or without a per-layer filter. Without a recording session it records
/// nothing.
#[derive(Debug)]
pub struct RingtraceLayer {
    _private: (),
}

/// Span state kept in the registry's extensions of each span.
struct Extensions<'a, 'b, S>(&'a Context<'b, S>);

impl<S> SpanStore for Extensions<'_, '_, S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        let span = self.0.span(id)?;
        let mut ext = span.extensions_mut();
        ext.get_mut::<SpanData>().map(f)
    }
}

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(data) = bridge::new_span(attrs) {
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(data);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
        bridge::record(&Extensions(&ctx), id, values);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        bridge::follows_from(&Extensions(&ctx), id, follows);
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        bridge::event(event);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        bridge::enter(&Extensions(&ctx), id);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        bridge::exit(&Extensions(&ctx), id);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        bridge::close(&Extensions(&ctx), &id);
    }
}

impl sealed::FromSession for RingtraceLayer {
    fn from_session() -> Self {
        RingtraceLayer { _private: () }
    }
}
