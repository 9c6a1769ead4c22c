//! How the commands print: a human table, or one JSON object with `--format json`, on a
//! stdout whose reader may go away.

use clap::ValueEnum;

/// Writes to stdout; a reader that went away (`| head`) ends the program quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

/// `out!` with a newline.
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {{ out!($($arg)*); out!("\n"); }};
}

/// How a command prints its answer.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// A human table.
    Table,
    /// One JSON object.
    Json,
}

/// The most characters a table cell shows; `--format json` carries the whole value.
const TABLE_CELL_MAX: usize = 100;

/// A cell as a table shows it: on one line, control characters escaped (`\n`, `\u{1b}`),
/// cut with an ellipsis past [`TABLE_CELL_MAX`] characters.
fn table_cell(s: &str) -> String {
    let mut cell = String::new();
    let mut count = 0;
    for c in s.chars() {
        let shown: String = if c.is_control() {
            c.escape_debug().collect()
        } else {
            c.to_string()
        };
        let n = shown.chars().count();
        if count + n > TABLE_CELL_MAX {
            cell.push('…');
            break;
        }
        count += n;
        cell.push_str(&shown);
    }
    cell
}

pub fn print_table(rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| table_cell(c)).collect())
        .collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        // Padded by hand: `format!`'s width is a u16, too small for no cell.
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let pad = widths[i].saturating_sub(cell.chars().count());
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        outln!("{}", cells.join("  ").trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_cell_is_one_line_and_cut_with_an_ellipsis() {
        assert_eq!(table_cell("ok"), "ok");
        assert_eq!(table_cell("a\nb\t\u{1b}[31m"), "a\\nb\\t\\u{1b}[31m");
        let long = table_cell(&"x".repeat(32 << 20));
        assert_eq!(long.chars().count(), TABLE_CELL_MAX + 1);
        assert!(long.ends_with('…'));
        // Cut on a character, never inside one.
        let wide = table_cell(&"é".repeat(1000));
        assert_eq!(wide.chars().count(), TABLE_CELL_MAX + 1);
    }
}
