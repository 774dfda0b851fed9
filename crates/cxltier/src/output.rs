//! Shared output helpers: compact aligned tables for people, JSON for scripts.
//!
//! Every JSON document and every JSON line the CLI prints goes through this module, so that each
//! carries the envelope `docs/json.md` describes: `schema_version` and `command` first (and, on a
//! JSON-lines stream, `event`), then the command's own fields. A command cannot print JSON without
//! it, and an output that is not an object (a bare list) fails here rather than reaching scripts.

use serde::Serialize;

/// The version of the JSON contract (`docs/json.md`, `docs/json/*.schema.json`). Renaming or
/// removing a field, or changing its type or unit, bumps it; adding a field does not.
pub const SCHEMA_VERSION: u32 = 1;

/// The envelope around one JSON document: the contract's version and the command that printed it,
/// then the command's fields (`body` must serialize as an object).
#[derive(Serialize)]
struct Envelope<'a, T: ?Sized> {
    schema_version: u32,
    command: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// Print `value` (an object) as pretty JSON on stdout, inside the envelope, for `command`
/// (`"topo"`, `"ycsb hit-bound"`, ...).
pub fn print_json<T: Serialize + ?Sized>(command: &str, value: &T) -> Result<(), crate::CliError> {
    // The envelope's fields are the envelope's: a body with its own `command` (a process's
    // name, say) would print the key twice, and readers keep either one.
    if let serde_json::Value::Object(fields) = serde_json::to_value(value)? {
        if let Some(key) = ["schema_version", "command"]
            .into_iter()
            .find(|k| fields.contains_key(*k))
        {
            return Err(crate::CliError::runtime(format!(
                "internal error: the `{command}` document has its own `{key}` field"
            )));
        }
    }
    let text = serde_json::to_string_pretty(&Envelope {
        schema_version: SCHEMA_VERSION,
        command,
        body: value,
    })?;
    println!("{text}");
    Ok(())
}

/// One line of a JSON-lines stream: the envelope, then `event` (what the line reports), then the
/// fields of `value` (an object) in their own order. A value that names its own `event` as its
/// first field keeps it (the libraries' reports name theirs: `tune_step`, `stopped`, ...); `event`
/// is for those that do not. Fields keep their order so that a line reads the same as before the
/// envelope (`"event":"tuned","pid":...`).
pub fn json_line<T: Serialize + ?Sized>(
    command: &str,
    event: &str,
    value: &T,
) -> Result<String, serde_json::Error> {
    let body = serde_json::to_string(value)?;
    let not_an_object = || {
        <serde_json::Error as serde::ser::Error>::custom(format!(
            "internal error: the `{command}` {event} line is not a JSON object, names its \
             event elsewhere than first, or has a field of the envelope: {body}"
        ))
    };
    // An object's text is `{`, then `}` or its first key.
    let fields = body.strip_prefix('{').ok_or_else(not_an_object)?;
    let own_event = fields.starts_with("\"event\":");
    let parsed: serde_json::Value = serde_json::from_str(&body)?;
    if (!own_event && parsed.get("event").is_some())
        || parsed.get("command").is_some()
        || parsed.get("schema_version").is_some()
    {
        return Err(not_an_object());
    }
    let mut line = format!(
        "{{\"schema_version\":{SCHEMA_VERSION},\"command\":{}",
        serde_json::to_string(command)?
    );
    if !own_event {
        line.push_str(",\"event\":");
        line.push_str(&serde_json::to_string(event)?);
    }
    if fields != "}" {
        line.push(',');
    }
    line.push_str(fields);
    Ok(line)
}

/// The error object printed on stderr when a command given `--json` fails: what went wrong, how
/// to fix it (`null` when not known) and the exit code, inside the envelope.
pub fn error_json(command: &str, err: &crate::CliError) -> String {
    #[derive(Serialize)]
    struct ErrorBody<'a> {
        error: &'a str,
        hint: Option<&'a str>,
        exit_code: u8,
    }
    let body = ErrorBody {
        error: &err.message,
        hint: err.hint.as_deref(),
        exit_code: err.kind.exit_code(),
    };
    serde_json::to_string(&Envelope {
        schema_version: SCHEMA_VERSION,
        command,
        body: &body,
    })
    // Strings, an integer and an optional string always encode.
    .unwrap_or_default()
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

    /// A table whose header is one line of `|`-separated column names (`"k|targets|ns"`), so
    /// that a wide header reads as the line it prints as.
    pub fn from_header(header: &str) -> Self {
        Table::new(header.split('|'))
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

/// Checks `line` (one JSON document or line) against `docs/json/<schema>`, for the unit tests of
/// outputs the integration tests cannot produce on an ordinary machine (tierd, `ras --watch`).
#[cfg(test)]
pub(crate) fn assert_conforms(schema: &str, line: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/json")
        .join(schema);
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let doc: serde_json::Value = serde_json::from_str(line).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{line}\ndoes not conform to {}:\n  {}",
        path.display(),
        errors.join("\n  ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_carries_the_envelope_and_keeps_its_fields_order() {
        #[derive(Serialize)]
        struct Own {
            event: &'static str,
            pid: u32,
            a: u8,
        }
        let line = json_line(
            "tierd",
            "fallback",
            &Own {
                event: "tuned",
                pid: 7,
                a: 1,
            },
        )
        .unwrap();
        assert_eq!(
            line,
            r#"{"schema_version":1,"command":"tierd","event":"tuned","pid":7,"a":1}"#
        );
        #[derive(Serialize)]
        struct Plain {
            z: u8,
            b: u8,
        }
        let line = json_line("topo", "sample", &Plain { z: 1, b: 2 }).unwrap();
        assert_eq!(
            line,
            r#"{"schema_version":1,"command":"topo","event":"sample","z":1,"b":2}"#
        );
        let empty = json_line("topo", "sample", &serde_json::json!({})).unwrap();
        assert_eq!(
            empty,
            r#"{"schema_version":1,"command":"topo","event":"sample"}"#
        );
    }

    #[test]
    fn a_line_that_would_repeat_an_envelope_field_or_is_no_object_is_refused() {
        #[derive(Serialize)]
        struct Late {
            pid: u32,
            event: &'static str,
        }
        assert!(json_line("x", "y", &Late { pid: 1, event: "e" }).is_err());
        assert!(json_line("x", "y", &serde_json::json!({"command": "ls"})).is_err());
        assert!(json_line("x", "y", &[1, 2]).is_err());
        assert!(print_json("x", &serde_json::json!({"command": "ls"})).is_err());
    }

    #[test]
    fn the_error_object_has_error_hint_and_exit_code() {
        let e = crate::CliError::bad_input("--mix 9: bad").with_hint("e.g. --mix 2:1");
        let v: serde_json::Value = serde_json::from_str(&error_json("plan", &e)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"schema_version": SCHEMA_VERSION, "command": "plan",
                "error": "--mix 9: bad", "hint": "e.g. --mix 2:1", "exit_code": 2})
        );
        let e = crate::CliError::runtime("boom");
        let v: serde_json::Value = serde_json::from_str(&error_json("plan", &e)).unwrap();
        assert!(v["hint"].is_null());
        assert_eq!(v["exit_code"], 1);
    }

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
