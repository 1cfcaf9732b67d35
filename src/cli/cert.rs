//! `liftbridge cert`: generate development TLS certificates.
//!
//! `liftbridge cert init --dir DIR --host H [--host H2 …]` writes a dev CA,
//! a server certificate for the hosts (always including `localhost`,
//! `127.0.0.1` and `::1`) and a client certificate for mTLS, then prints the
//! paths. The work is done by [`crate::tls::generate_dev_certs`]; this file
//! only parses arguments and prints. These certificates are for development
//! and tests, not for production trust.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Arguments of this subcommand.
#[derive(Debug, Clone, Args)]
pub struct CertArgs {
    #[command(subcommand)]
    pub command: CertCommand,
}

/// `cert` actions.
#[derive(Debug, Clone, Subcommand)]
pub enum CertCommand {
    /// Create a dev CA, a server certificate and a client certificate.
    Init {
        /// Directory to write the PEM files into (created if missing).
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
        /// Host name or IP address the server certificate is valid for
        /// (repeatable; localhost and 127.0.0.1 are always included).
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
}

/// Runs the subcommand.
pub fn run(args: CertArgs) -> anyhow::Result<()> {
    match args.command {
        CertCommand::Init { dir, hosts } => {
            let p = crate::tls::generate_dev_certs(&dir, &hosts)?;
            println!("CA certificate:     {}", p.ca_cert.display());
            println!("CA key:             {}", p.ca_key.display());
            println!("server certificate: {}", p.server_cert.display());
            println!("server key:         {}", p.server_key.display());
            println!("client certificate: {}", p.client_cert.display());
            println!("client key:         {}", p.client_key.display());
            Ok(())
        }
    }
}
