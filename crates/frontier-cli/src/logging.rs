//! Where the library's warnings and the crawl's decisions go: a tracing subscriber on
//! standard error, set by `-v`/`-q`, `RUST_LOG` and `--log-format`.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per event.
    Json,
}

/// Installs the subscriber. `verbosity` counts `-v` minus `-q`: -1 errors only, 0
/// warnings (the default), 1 info (backoff, Crawl-delay), 2 debug, 3 trace. `RUST_LOG`,
/// when set, decides instead (e.g. `RUST_LOG=polite_throttle_core=debug`).
pub fn init(verbosity: i8, format: LogFormat) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec)
            .map_err(|e| crate::UsageError::new(format!("RUST_LOG={spec:?}: {e}")))?,
        _ => EnvFilter::new(match verbosity {
            i8::MIN..=-1 => "error",
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // A second init (tests calling `run_*` twice) keeps the first subscriber.
    let _ = installed;
    Ok(())
}
