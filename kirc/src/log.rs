//! Diagnostic logging: the `tracing` events of the kir crates (the e-graph's stop reason and
//! costs per kernel, `kir_compiler::egraph`) printed to stderr when `KIR_LOG` is set.
//!
//! `KIR_LOG` takes the filter syntax of `tracing_subscriber::filter::Targets`: a level (`error`,
//! `warn`, `info`, `debug`, `trace`) for every crate, or `TARGET=LEVEL` pairs separated by
//! commas (`KIR_LOG=kir_compiler::egraph=debug`). Unset or empty, nothing is logged and no
//! subscriber is installed; a value that does not parse is a user error (exit code 2).

use crate::common::CliError;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable that turns logging on.
pub const VAR: &str = "KIR_LOG";

/// Installs a stderr subscriber filtered by `KIR_LOG`, when it is set and not empty.
pub fn init() -> Result<(), CliError> {
    let Some(value) = std::env::var_os(VAR) else {
        return Ok(());
    };
    let value = value
        .into_string()
        .map_err(|v| CliError::Plain(format!("{VAR}={v:?} is not UTF-8")))?;
    if value.trim().is_empty() {
        return Ok(());
    }
    let filter: Targets = value.trim().parse().map_err(|e| {
        CliError::Plain(format!(
            "{VAR}={value:?} is not a log filter ({e}): give a level (error, warn, info, \
             debug, trace) or TARGET=LEVEL pairs separated by commas"
        ))
    })?;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .without_time();
    tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init()
        .map_err(|e| CliError::Plain(format!("{VAR}: cannot install the logger: {e}")))
}
