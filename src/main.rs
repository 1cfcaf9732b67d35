//! The `liftbridge` binary: everything lives in the library; see `liftbridge::cli`.

fn main() -> std::process::ExitCode {
    liftbridge::cli::main(std::env::args_os().collect())
}
