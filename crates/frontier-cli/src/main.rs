//! The `frontier` command: `demo`, `crawl`, `simulate`, `inspect`.
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use polite_frontier_cli::{commands, inspect, simulate};

/// Schedule web-crawl requests politely and fast.
#[derive(Parser)]
#[command(name = "frontier", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a small web of local sites on loopback and crawl it (the main demo).
    Demo(commands::DemoArgs),
    /// Crawl real sites politely; rerun with the same --store to resume.
    Crawl(commands::CrawlArgs),
    /// Replay a scenario or model a crawl on a virtual clock; JSON lines out.
    Simulate(simulate::SimulateArgs),
    /// Show what a stored frontier holds.
    Inspect(inspect::InspectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => commands::run_demo(args),
        Command::Crawl(args) => commands::run_crawl(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("frontier: {error:#}");
            ExitCode::from(2)
        }
    }
}
