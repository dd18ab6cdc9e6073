//! Why a command failed, as one message for stderr and one exit code per class of failure.
//!
//! Scripts branch on the exit code, never on the message: each [`Class`] has its own code, listed
//! in `--help` ([`EXIT_CODES`]) and in `cli/README.md`. The class of an SDK error is read from its kind
//! and the HTTP status the server answered with; no message is parsed.

use seed_agents_sdk::Error;

/// A class of failure, with its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A local file could not be read or written, or keygen would overwrite a key.
    Local = 1,
    /// Bad flags or arguments, input that is not JSON or does not fit the action, a bad URL or
    /// `--jq` filter.
    Usage = 2,
    /// No usable key file.
    Key = 3,
    /// The server answered 404.
    NotFound = 4,
    /// The server answered 401: the signature, timestamp or signer was refused.
    Unauthenticated = 5,
    /// The server answered 403.
    Forbidden = 6,
    /// The server answered 409.
    Conflict = 7,
    /// The server refused the request otherwise (another 4xx), or refused a subscription.
    Rejected = 8,
    /// The server failed (5xx, including 501 for what it does not support).
    ServerFailure = 9,
    /// The server refuses this client's protocol version as too old (426).
    ProtocolTooOld = 10,
    /// No answer: connection refused, DNS, TLS, timeout.
    Unreachable = 11,
    /// The server answered something that is not a valid response.
    BadAnswer = 12,
    /// The action ran, and its result reports a failure (a verb of InvokeSessionTool that failed,
    /// a failed provider sign-in); the response is printed.
    ResultFailed = 13,
}

/// The exit-code table shown by `--help` (a unit test keeps it equal to [`Class`]).
pub const EXIT_CODES: &str = "\
Exit codes:
   0  success
   1  a local file could not be read or written (or keygen would overwrite a key)
   2  usage: bad arguments, input not JSON or not fitting the action, bad URL or --jq
   3  no usable key file (run `seed-agents keygen`)
   4  not found (HTTP 404)
   5  not authenticated (HTTP 401: signature, timestamp or signer refused)
   6  forbidden (HTTP 403)
   7  conflict (HTTP 409)
   8  other refusal (other 4xx; a subscription the server refused)
   9  server failure (5xx, including 501 not supported)
  10  this client's protocol is too old for the server (HTTP 426)
  11  server unreachable (connection refused, DNS, TLS, timeout)
  12  the server's answer could not be decoded
  13  the action ran but its result reports a failure (printed): InvokeSessionTool's error,
      a failed GetProviderOAuthStatus";

/// A failed command: what to print and how to exit.
#[derive(Debug)]
pub struct Failure {
    /// Decides the exit code.
    pub class: Class,
    /// One line (or a few) for stderr.
    pub message: String,
}

impl Failure {
    /// A failure of `class` with `message`.
    pub fn new(class: Class, message: impl Into<String>) -> Self {
        Self { class, message: message.into() }
    }

    /// A usage failure.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Class::Usage, message)
    }

    /// A local I/O failure.
    pub fn local(message: impl Into<String>) -> Self {
        Self::new(Class::Local, message)
    }

    /// The exit code.
    pub fn exit_code(&self) -> u8 {
        self.class as u8
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let class = classify(&error);
        // A transport error says why only at the end of its chain ("connection refused"); the
        // command names the server's URL around it (`commands::run`).
        let mut message = if class == Class::Unreachable { root_cause(&error) } else { chain(&error) };
        if let Some(code) = error.code() {
            message.push_str(&format!(" (code {code})"));
        }
        Failure { class, message }
    }
}

/// An error and its sources, `: `-separated (a transport error says why only in its sources:
/// "connection refused" is three levels down), skipping a source its parent already quoted.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// The innermost source of an error: the reason itself, without the layers that wrapped it.
pub fn root_cause(error: &dyn std::error::Error) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// The class of an SDK error: by its kind, then by the HTTP status the server sent.
///
/// Written with `matches!` and `if let` rather than an exhaustive `match`, so a new kind of
/// `Error` falls through to its status instead of breaking the build.
pub fn classify(error: &Error) -> Class {
    if let Error::Upload { source, .. } = error {
        return classify(source);
    }
    if matches!(error, Error::ProtocolTooOld { .. }) {
        return Class::ProtocolTooOld;
    }
    if matches!(error, Error::InvalidUrl { .. }) {
        return Class::Usage;
    }
    if matches!(error, Error::Source(_)) {
        return Class::Local;
    }
    if matches!(error, Error::Decode { .. }) {
        return Class::BadAnswer;
    }
    match error.status() {
        Some(status) => class_of_status(status),
        None if matches!(error, Error::Transport(_)) => Class::Unreachable,
        None => Class::Local,
    }
}

/// The class of an HTTP status the server answered a request with.
pub fn class_of_status(status: u16) -> Class {
    match status {
        401 => Class::Unauthenticated,
        403 => Class::Forbidden,
        404 => Class::NotFound,
        409 => Class::Conflict,
        426 => Class::ProtocolTooOld,
        400..=499 => Class::Rejected,
        500..=599 => Class::ServerFailure,
        _ => Class::BadAnswer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Class; 13] = [
        Class::Local,
        Class::Usage,
        Class::Key,
        Class::NotFound,
        Class::Unauthenticated,
        Class::Forbidden,
        Class::Conflict,
        Class::Rejected,
        Class::ServerFailure,
        Class::ProtocolTooOld,
        Class::Unreachable,
        Class::BadAnswer,
        Class::ResultFailed,
    ];

    /// Every class has its own code, and the help text lists exactly those codes, in order.
    #[test]
    fn the_help_table_lists_every_class_once() {
        let listed: Vec<u8> = EXIT_CODES
            .lines()
            .skip(1)
            .filter(|line| !line.starts_with("    "))
            .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
            .collect();
        let mut expected = vec![0];
        expected.extend(ALL.iter().map(|class| *class as u8));
        assert_eq!(listed, expected);
    }

    /// The crate README's table says the same as `--help`.
    #[test]
    fn the_readme_lists_every_exit_code() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        for line in EXIT_CODES.lines().skip(1).filter(|line| !line.starts_with("    ")) {
            let code = line.split_whitespace().next().unwrap();
            assert!(readme.contains(&format!("| {code} |")), "README's CLI exit codes lack {code}");
        }
    }

    #[test]
    fn statuses_map_to_their_classes() {
        assert_eq!(class_of_status(404), Class::NotFound);
        assert_eq!(class_of_status(401), Class::Unauthenticated);
        assert_eq!(class_of_status(403), Class::Forbidden);
        assert_eq!(class_of_status(409), Class::Conflict);
        assert_eq!(class_of_status(413), Class::Rejected);
        assert_eq!(class_of_status(400), Class::Rejected);
        assert_eq!(class_of_status(501), Class::ServerFailure);
        assert_eq!(class_of_status(503), Class::ServerFailure);
        assert_eq!(class_of_status(426), Class::ProtocolTooOld);
        assert_eq!(class_of_status(302), Class::BadAnswer);
    }

    #[test]
    fn api_errors_keep_their_code_in_the_message() {
        let error = Error::api(404, "Agent not found", Some("not_found".into()));
        let failure = Failure::from(error);
        assert_eq!(failure.class, Class::NotFound);
        assert_eq!(failure.exit_code(), 4);
        assert!(failure.message.contains("Agent not found") && failure.message.contains("not_found"));
        let upload = Error::upload("u1", 3, Error::api(409, "conflict", None));
        assert_eq!(classify(&upload), Class::Conflict);
    }
}
