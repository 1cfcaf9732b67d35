//! The HTTP port: NATS monitoring JSON, metrics, admin API and UI.
