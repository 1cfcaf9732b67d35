//! Load generators and side-by-side benchmarks.

pub mod cluster;
pub mod lb;
pub mod leaf;
pub mod nats;
pub mod routes;
pub mod store;

use std::path::PathBuf;

/// The first file called `name` in a directory of `PATH`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A loopback port that was free a moment ago (for servers the benchmarks start).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
