//! Client authentication and per-user permissions.
