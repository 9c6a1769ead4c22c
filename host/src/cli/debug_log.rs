//! `debug-log`: what charms logged, per unit, with the hook and the time.

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result};

use charm_host::model::LogRecord;

use super::output::Format;
use super::{ModelArgs, print_json};

/// `charm-host debug-log [--unit UNIT] [--follow] [--lines N]`.
#[derive(clap::Args)]
pub struct DebugLogArgs {
    /// Only this unit's lines.
    #[arg(long)]
    pub unit: Option<String>,
    /// Keep printing new lines as hooks log them, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How many of the newest lines to print first.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub lines: usize,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// How often `--follow` looks for new lines.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// Runs `debug-log`.
pub async fn run(args: DebugLogArgs) -> Result<()> {
    let store = args.model.open_read_only().await?;
    let read = |lines| {
        let store = store.clone();
        let unit = args.unit.clone();
        async move {
            store
                .debug_log(unit.as_deref(), lines)
                .await
                .with_context(|| match &unit {
                    Some(unit) => format!("debug-log --unit {unit}"),
                    None => "debug-log".to_string(),
                })
        }
    };
    let first = read(args.lines).await?;
    if args.model.format == Format::Json && !args.follow {
        return print_json(&serde_json::to_value(&first)?);
    }
    let mut seen: BTreeSet<(String, u64)> = BTreeSet::new();
    print_lines(&first, &mut seen, args.model.format)?;
    if !args.follow {
        return Ok(());
    }
    loop {
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        // The rings hold what is new since the last look, and what was printed before.
        let lines = read(usize::MAX).await?;
        print_lines(&lines, &mut seen, args.model.format)?;
    }
}

/// Prints the lines not printed yet: a line each, or a JSON object each with `--format json`.
fn print_lines(
    lines: &[LogRecord],
    seen: &mut BTreeSet<(String, u64)>,
    format: Format,
) -> Result<()> {
    for line in lines {
        if !seen.insert((line.unit.clone(), line.seq)) {
            continue;
        }
        if format == Format::Json {
            outln!("{}", serde_json::to_string(line)?);
        } else {
            outln!(
                "{} {} {} {}: {}",
                timestamp(line.at_ms),
                line.unit,
                line.hook,
                line.level.to_uppercase(),
                printable(&line.message)
            );
        }
    }
    Ok(())
}

/// A charm's line as a terminal shows it safely: control characters (a terminal's escape
/// sequences among them) escaped, as `\u{1b}`; `--format json` carries the line as it is.
fn printable(message: &str) -> String {
    message
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().collect()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `at_ms` as UTC `YYYY-MM-DD HH:MM:SS.mmm`.
pub(crate) fn timestamp(at_ms: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(at_ms);
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        at_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        assert_eq!(super::printable("ok é"), "ok é");
        assert_eq!(super::printable("\u{1b}[2J\r"), "\\u{1b}[2J\\r");
    }

    #[test]
    fn timestamps_are_utc_calendar_times() {
        assert_eq!(super::timestamp(0), "1970-01-01 00:00:00.000");
        assert_eq!(super::timestamp(951_782_400_123), "2000-02-29 00:00:00.123");
        assert_eq!(
            super::timestamp(1_796_428_799_999),
            "2026-12-04 23:59:59.999"
        );
    }
}
