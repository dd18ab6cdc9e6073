//! Triggers: what makes an agent act without being messaged.
//!
//! [`schedule`] decides when interval, weekly and once schedules are due; [`activity`] polls the
//! Hypermedia activity feed and matches events to activity sources; both hand each decision, a
//! [`sink::TriggerMatch`] with a deterministic firing key, to a [`sink::FiringSink`] that records
//! the firing once. [`monitor`] runs both on a timer until shutdown.

pub mod activity;
pub mod monitor;
pub mod schedule;
pub mod sink;
