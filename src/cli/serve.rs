//! `liftbridge serve`: the default mode.

use clap::Args;

/// Options of the server mode.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Data directory.
    #[arg(short = 'd', long = "data-dir", global = true)]
    pub data_dir: Option<std::path::PathBuf>,
}

/// Runs the server until it is told to stop.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("the server is not wired yet (data dir {:?})", args.data_dir)
}
