//! The process's recent log lines, kept for `getLog`: a tracing layer that renders each event as a
//! mongod-style JSON line (`{"t": {"$date": ...}, "s", "c", "msg", "attr"}`) into a bounded ring.
//! Invariant: memory is bounded by [`CAPACITY`] lines; older lines are dropped, and
//! `totalLinesWritten` keeps counting them.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// Lines kept for `getLog: "global"` (mongod keeps 1024 too).
pub(crate) const CAPACITY: usize = 1024;

#[derive(Default)]
struct Ring {
    lines: VecDeque<String>,
    total_written: u64,
}

fn ring() -> &'static Mutex<Ring> {
    static RING: OnceLock<Mutex<Ring>> = OnceLock::new();
    RING.get_or_init(Mutex::default)
}

/// `(totalLinesWritten, the lines still held, oldest first)`.
pub(crate) fn recent_lines() -> (u64, Vec<String>) {
    let ring = ring()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    (ring.total_written, ring.lines.iter().cloned().collect())
}

fn push(line: String) {
    let mut ring = ring()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if ring.lines.len() == CAPACITY {
        ring.lines.pop_front();
    }
    ring.lines.push_back(line);
    ring.total_written += 1;
}

/// Renders a log line as mongod does. Also used for startup warnings.
pub(crate) fn render_line(
    severity: &str,
    component: &str,
    message: &str,
    attributes: Map<String, Value>,
) -> String {
    let now = bson::DateTime::now()
        .try_to_rfc3339_string()
        .unwrap_or_default();
    let mut line = json!({"t": {"$date": now}, "s": severity, "c": component, "msg": message});
    if !attributes.is_empty() {
        line["attr"] = Value::Object(attributes);
    }
    line.to_string()
}

/// A tracing layer that feeds the ring.
pub struct CaptureLayer;

impl<S: Subscriber> Layer<S> for CaptureLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut visitor = FieldCollector::default();
        event.record(&mut visitor);
        let severity = match *event.metadata().level() {
            Level::ERROR => "E",
            Level::WARN => "W",
            Level::INFO => "I",
            _ => "D1",
        };
        let component = event.metadata().target();
        push(render_line(
            severity,
            component,
            &visitor.message,
            visitor.attributes,
        ));
    }
}

#[derive(Default)]
struct FieldCollector {
    message: String,
    attributes: Map<String, Value>,
}

impl Visit for FieldCollector {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.attributes
                .insert(field.name().to_owned(), Value::from(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attributes
            .insert(field.name().to_owned(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.attributes
            .insert(field.name().to_owned(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attributes
            .insert(field.name().to_owned(), Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.attributes
                .insert(field.name().to_owned(), Value::from(text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn events_become_mongod_style_json_lines() {
        let subscriber = tracing_subscriber::registry().with(CaptureLayer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(port = 27017, "capture test line");
        });
        let (total, lines) = recent_lines();
        assert!(total >= 1);
        let line = lines
            .iter()
            .rev()
            .find(|l| l.contains("capture test line"))
            .expect("line captured");
        let parsed: Value = serde_json::from_str(line).unwrap();
        assert_eq!(parsed["s"], "W");
        assert_eq!(parsed["msg"], "capture test line");
        assert_eq!(parsed["attr"]["port"], 27017);
        assert!(parsed["t"]["$date"].as_str().unwrap().contains('T'));
    }
}
