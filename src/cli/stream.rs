//! `liftbridge stream`: manage streams through the gRPC API.

use clap::Args;

/// Arguments of this subcommand.
#[derive(Debug, Clone, Args)]
pub struct StreamArgs {
    /// Remaining arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub rest: Vec<String>,
}

/// Runs the subcommand.
pub fn run(args: StreamArgs) -> anyhow::Result<()> {
    anyhow::bail!("not available yet ({} arguments)", args.rest.len())
}
