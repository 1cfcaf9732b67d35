//! TLS configuration (rustls) for the listeners, and dev certificate generation.
