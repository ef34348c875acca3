//! `kfdq` — the command line. See `kfdq --help`.
fn main() -> std::process::ExitCode {
    kfdq::cli::main()
}
