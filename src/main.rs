//! The `switchboard` binary: parse, run, map the outcome to an exit code
//! (`switchboard::cli::exit` says which).

use std::process::ExitCode;

use switchboard::cli::exit;

fn main() -> ExitCode {
    let cli = switchboard::cli::Cli::parse_args();
    switchboard::daemon::log::init_tracing(cli.log_file(), cli.quiet_log());
    let runtime = if cli.is_front_end() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return exit::code(exit::FAILURE);
        }
    };
    let result = runtime.block_on(switchboard::cli::run(cli));
    // A blocking stdin read (a terminal, a file) must not hold the exit: everything that
    // matters (journal, state) was flushed by `serve` before it returned.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => code,
        // The reader went away (`switchboard list | head -1`): that is how a pipe ends, not an
        // error (ripgrep does the same).
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit::code_of(&err)
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
