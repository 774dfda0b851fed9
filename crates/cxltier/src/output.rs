//! Shared output helpers: compact aligned tables for people, JSON for scripts.

use serde::Serialize;

/// Print `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> Result<(), crate::CliError> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{text}");
    Ok(())
}

/// A plain text table whose columns are padded to their widest cell, in the manner of `numactl -H`
/// and `cxl list` summaries. Numeric-looking cells are right aligned.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<I, S>(header: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let ncols = self
            .header
            .len()
            .max(self.rows.iter().map(Vec::len).max().unwrap_or(0));
        let mut width = vec![0usize; ncols];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                width[i] = width[i].max(cell.chars().count());
            }
        }
        let numeric = |s: &str| {
            !s.is_empty()
                && s.chars().all(|c| c.is_ascii_digit() || ".-+%x".contains(c))
                && s.chars().any(|c| c.is_ascii_digit())
        };
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = width[i] - cell.chars().count();
                if numeric(cell) && !std::ptr::eq(row, &self.header) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_and_right_aligns_numbers() {
        let mut t = Table::new(["node", "kind", "GB/s"]);
        t.row(["0", "dram", "556.0"]);
        t.row(["1", "cxl", "20.5"]);
        let text = t.render();
        assert_eq!(
            text,
            "node  kind  GB/s\n   0  dram  556.0\n   1  cxl    20.5\n"
        );
    }
}
