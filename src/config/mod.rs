//! Typed configuration.
//!
//! One tree, defaults in code, validated once at start-up. Loaders for the
//! different surfaces live in submodules: `nats` holds the options of the
//! embedded NATS server (shared by the default `serve` mode and the
//! `nats-server` compatibility mode); `liftbridge` holds the Liftbridge
//! configuration tree (`liftbridge.yaml`, `LIFTBRIDGE_*` variables, flags).

pub mod audit;
pub mod duration;
pub mod external;
pub mod liftbridge;
pub mod nats;
pub mod nats_conf;

pub use nats::{AuthConfig, NatsOptions, PermissionRules, Permissions, TlsFiles, User};
