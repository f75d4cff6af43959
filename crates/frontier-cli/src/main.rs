//! The `frontier` command: `demo`, `crawl`, `simulate`, `inspect`.
use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};
use polite_frontier_cli::logging::{self, LogFormat};
use polite_frontier_cli::{commands, exit_status, inspect, simulate};

/// Schedule web-crawl requests politely and fast.
///
/// Exit status: 0 finished and no page failed; 1 finished with failed pages (counted in
/// the summary) or a fatal error; 2 usage or configuration error; 130 interrupted.
#[derive(Parser)]
#[command(
    name = "frontier",
    version,
    about,
    long_about,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output on standard error (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log output: errors only.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    quiet: u8,
    /// How log lines are written (`RUST_LOG` picks what is logged, over -v and -q).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Start a small web of local sites on loopback and crawl it (the main demo).
    Demo(commands::DemoArgs),
    /// Crawl real sites politely; rerun with the same --store to resume.
    Crawl(Box<commands::CrawlArgs>),
    /// Replay a scenario or model a crawl on a virtual clock; JSON lines out.
    Simulate(simulate::SimulateArgs),
    /// Show what a stored frontier holds.
    Inspect(inspect::InspectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let verbosity = i8::try_from(i16::from(cli.verbose) - i16::from(cli.quiet)).unwrap_or(0);
    if let Err(error) = logging::init(verbosity, cli.log_format) {
        eprintln!("frontier: {error:#}");
        return ExitCode::from(2);
    }
    // A scenario that cannot be simulated is a mistake in its file: status 2, always.
    let simulating = matches!(cli.command, Command::Simulate(_));
    let result = match cli.command {
        Command::Demo(args) => commands::run_demo(args),
        Command::Crawl(args) => commands::run_crawl(*args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("frontier: {error:#}");
            ExitCode::from(if simulating { 2 } else { exit_status(&error) })
        }
    }
}
