//! `--jq FILTER`: a jq filter over the JSON output, as `gh api --jq` does (jaq: jaq-core,
//! jaq-std and jaq-json, a pure-Rust jq).
//!
//! The filter is compiled once, before anything is sent, so a bad filter is a usage error that
//! costs no request. Each result is printed on its own line: strings raw (without quotes), other
//! values as compact JSON. jq's format strings are all there: `@text`, `@json`, `@html`, `@uri`,
//! `@sh`, `@base64` and `@base64d` from jaq's standard library, and `@csv` and `@tsv` from jaq's
//! own CSV/TSV writer (jaq-fmts), which its standard library leaves to the command-line tool.

use jaq_core::data::JustLut;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::native::{Filter as NativeFilter, Fun, bome, run, v};
use jaq_core::{Ctx, Native, RunPtr, Vars, compile};
use jaq_fmts::write::tabular::Row;
use jaq_json::Val;

use crate::failure::{Class, Failure};

/// What filters run over: JSON values, and nothing global but the filters themselves.
type Data = JustLut<Val>;

/// `@csv` and `@tsv`: an array of strings, numbers, booleans and nulls as one CSV or TSV row, as
/// jq writes it.
fn formats() -> impl Iterator<Item = Fun<Data>> {
    fn row(
        value: &Val,
        format: &str,
        write: fn(&Row, &mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<Val, jaq_json::Error> {
        let row = Row::try_from(value).map_err(|error| jaq_json::Error::str(format_args!("@{format}: {error}")))?;
        let mut text = Vec::new();
        write(&row, &mut text).map_err(|error| jaq_json::Error::str(format_args!("@{format}: {error}")))?;
        Ok(Val::utf8_str(text))
    }
    let filters: Box<[NativeFilter<RunPtr<Data>>]> = Box::new([
        ("@csv", v(0), |cv| bome(row(&cv.1, "csv", Row::write_csv))),
        ("@tsv", v(0), |cv| bome(row(&cv.1, "tsv", Row::write_tsv))),
    ]);
    filters.into_vec().into_iter().map(run::<Data>)
}

/// A compiled filter.
pub struct Filter {
    filter: compile::Filter<Native<Data>>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter").finish_non_exhaustive()
    }
}

impl Filter {
    /// Parses and compiles `code` with jq's standard library.
    pub fn new(code: &str) -> Result<Filter, Failure> {
        let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
        let funs = jaq_core::funs().chain(jaq_std::funs()).chain(jaq_json::funs()).chain(formats());
        let arena = Arena::default();
        let modules = Loader::new(defs).load(&arena, File { code, path: () }).map_err(|errors| {
            let reasons: Vec<String> = errors.into_iter().map(|(_, error)| load_error(code, error)).collect();
            Failure::usage(format!("--jq: {}", reasons.join("; ")))
        })?;
        let filter = jaq_core::Compiler::default().with_funs(funs).compile(modules).map_err(|errors| {
            let reasons: Vec<String> = errors
                .into_iter()
                .flat_map(|(_, undefined)| undefined)
                .map(|(name, kind)| format!("undefined {kind:?} `{name}`"))
                .collect();
            Failure::usage(format!("--jq: {}", reasons.join("; ")))
        })?;
        Ok(Filter { filter })
    }

    /// Runs the filter over `input` (JSON text); each result as a line to print.
    pub fn run(&self, input: &str) -> Result<Vec<String>, Failure> {
        let input = jaq_json::read::parse_single(input.as_bytes())
            .map_err(|error| Failure::local(format!("--jq: cannot read the output as JSON: {error}")))?;
        let ctx = Ctx::<JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut lines = Vec::new();
        for result in self.filter.id.run((ctx, input)).map(jaq_core::unwrap_valr) {
            match result {
                Ok(Val::TStr(text)) => lines.push(String::from_utf8_lossy(&text).into_owned()),
                Ok(value) => lines.push(value.to_string()),
                Err(error) => return Err(Failure::new(Class::Usage, format!("--jq: {error}"))),
            }
        }
        Ok(lines)
    }
}

/// A lexing or parsing error, with where in the user's filter it happened.
fn load_error(program: &str, error: jaq_core::load::Error<&str>) -> String {
    use jaq_core::load::Error;
    let at = |rest: &str| {
        let offset = (rest.as_ptr() as usize).saturating_sub(program.as_ptr() as usize).min(program.len());
        format!("at character {offset}")
    };
    match error {
        Error::Io(errors) => {
            errors.into_iter().map(|(path, reason)| format!("{path}: {reason}")).collect::<Vec<_>>().join("; ")
        }
        Error::Lex(errors) => errors
            .into_iter()
            .map(|(expected, rest)| format!("expected {} {}", expected.as_str(), at(rest)))
            .collect::<Vec<_>>()
            .join("; "),
        Error::Parse(errors) => errors
            .into_iter()
            .map(|(expected, rest)| format!("expected {} {}", expected.as_str(), at(rest)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_lines_strings_raw() {
        let filter = Filter::new(".agents[] | .id").unwrap();
        assert_eq!(filter.run(r#"{"agents": [{"id": "a"}, {"id": "b"}]}"#).unwrap(), ["a", "b"]);
        let filter = Filter::new("{n: (.agents | length)}").unwrap();
        assert_eq!(filter.run(r#"{"agents": [1, 2]}"#).unwrap(), [r#"{"n":2}"#]);
        let filter = Filter::new(r#"map(select(startswith("x"))) | sort"#).unwrap();
        assert_eq!(filter.run(r#"["xb", "y", "xa"]"#).unwrap(), [r#"["xa","xb"]"#]);
    }

    #[test]
    fn csv_and_tsv_format_rows_as_jq_does() {
        let input = r#"{"rows": [["a", "b,\"c\"", 1, true, null], ["tab\there", "new\nline", "back\\slash"]]}"#;
        let csv = Filter::new(".rows[] | @csv").unwrap().run(input).unwrap();
        assert_eq!(
            csv,
            [
                r#""a","b,""c""",1,true,"#,
                r#""tab	here","new
line","back\slash""#
            ]
        );
        let tsv = Filter::new(".rows[] | @tsv").unwrap().run(input).unwrap();
        assert_eq!(tsv, ["a\tb,\"c\"\t1\ttrue\t", r"tab\there	new\nline	back\\slash"]);
        let refused = Filter::new("@csv").unwrap().run(r#"{"a": 1}"#).unwrap_err();
        assert!(refused.message.contains("@csv: expected table row (array)"), "{}", refused.message);
        let nested = Filter::new("@tsv").unwrap().run(r#"[[1]]"#).unwrap_err();
        assert!(nested.message.contains("@tsv: expected table field"), "{}", nested.message);
    }

    #[test]
    fn the_other_formats_are_jqs() {
        let run = |code: &str, input: &str| Filter::new(code).unwrap().run(input).unwrap();
        assert_eq!(run("@json", r#"{"a": [1, "x"]}"#), [r#"{"a":[1,"x"]}"#]);
        assert_eq!(run("@text", "[1]"), ["[1]"]);
        assert_eq!(run("@base64", r#""hello""#), ["aGVsbG8="]);
        assert_eq!(run("@base64d", r#""aGVsbG8=""#), ["hello"]);
        assert_eq!(run("@sh", r#"["it's", 1]"#), [r#"'it'\''s' 1"#]);
        assert_eq!(run(r#"@uri "q=\(.)""#, r#""a b""#), ["q=a%20b"]);
    }

    #[test]
    fn a_syntax_error_is_placed_in_the_users_filter() {
        let failure = Filter::new(".a | ]").unwrap_err();
        assert!(failure.message.contains("at character 5"), "{}", failure.message);
    }

    #[test]
    fn bad_filters_are_usage_failures() {
        for code in [".agents[", "nosuchfunction(1)", "if . then 1"] {
            let failure = Filter::new(code).unwrap_err();
            assert_eq!(failure.class, Class::Usage, "{code}");
            assert!(failure.message.starts_with("--jq: "), "{}", failure.message);
        }
        let error = Filter::new(r#"error("no")"#).unwrap().run("{}").unwrap_err();
        assert!(error.message.contains("no"), "{}", error.message);
    }
}
