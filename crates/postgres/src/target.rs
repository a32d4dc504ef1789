//! The database a tideway node uses: its URI parsed into a client configuration, and the same URI
//! without its password for every message that names it.

use std::error::Error;
use std::str::FromStr;

use crate::schema::Layout;
use crate::tls::{split_tls_parameters, TlsSettings};
use tideway_storage::{StorageError, StorageResult};

/// A parsed `postgresql://` (or `postgres://`) URI.
#[derive(Clone, Debug)]
pub struct Target {
    config: tokio_postgres::Config,
    tls: TlsSettings,
    redacted: String,
    /// The URI's own `options`, before the plan mode is added ([`Target::plan_for`]).
    given_options: Option<String>,
}

impl Target {
    /// Parses `uri` (with libpq's `sslmode` and `sslrootcert`, see the `tls` module); a malformed
    /// one is an error naming it without its password.
    pub fn parse(uri: &str) -> StorageResult<Target> {
        let redacted = redact(uri);
        let named = |error: StorageError| match error {
            StorageError::Io(message) => StorageError::Io(format!("{message} ({redacted})")),
            other => other,
        };
        let (rest, tls) = split_tls_parameters(uri).map_err(named)?;
        let mut config = tokio_postgres::Config::from_str(&rest).map_err(|error| {
            StorageError::Io(format!("invalid PostgreSQL URI {redacted}: {error}"))
        })?;
        config.ssl_mode(tls.ssl_mode);
        let given_options = config.get_options().map(str::to_owned);
        let mut target = Target {
            config,
            tls,
            redacted,
            given_options,
        };
        target.plan_for(Layout::Local);
        Ok(target)
    }

    /// Sets how the database plans tideway's statements on `layout`'s tables. On local tables
    /// every statement is prepared with parameters, each built for one access path through an
    /// index; a generic plan keeps that path whatever the statistics say about one parameter's
    /// value (a collection created since the last ANALYZE looks empty, and a custom plan for it
    /// may scan it per row), and is not planned again at each execution. Citus cannot turn a
    /// generic plan of a statement that reaches several shards into a distributed one, so on
    /// its tables every execution is planned with its values (Citus then routes a statement
    /// to the shards those values name).
    pub(crate) fn plan_for(&mut self, layout: Layout) {
        let mode = match layout {
            Layout::Local => "force_generic_plan",
            Layout::Citus => "force_custom_plan",
        };
        let options = match &self.given_options {
            Some(given) => format!("{given} -c plan_cache_mode={mode}"),
            None => format!("-c plan_cache_mode={mode}"),
        };
        self.config.options(&options);
    }

    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    pub(crate) fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// The URI without its password (in the user information or a `password` parameter).
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// `what` failed on this database, because of `error` (with every cause below it: the
    /// client's errors say "db error" and keep the server's message in their source), as a
    /// storage error (an I/O error: survivable, the next attempt may succeed).
    /// `error` as the engine's error: `Unavailable` when the database cannot be reached (no
    /// connection, a lost one, the server shutting down or not accepting connections), `Io`
    /// otherwise; either names the database without its password.
    pub fn error(&self, what: &str, error: impl Error + 'static) -> StorageError {
        let unreachable = is_unreachable(&error);
        let message = self.describe(what, error);
        if unreachable {
            StorageError::Unavailable(message)
        } else {
            StorageError::Io(message)
        }
    }

    fn describe(&self, what: &str, error: impl Error) -> String {
        let mut message = error.to_string();
        let mut cause = error.source();
        while let Some(inner) = cause {
            let text = inner.to_string();
            if !message.ends_with(&text) {
                message = format!("{message}: {text}");
            }
            cause = inner.source();
        }
        format!("{what} ({}): {message}", self.redacted)
    }
}

/// `uri` naming database `database` instead of its own (query parameters kept): how tests and
/// tools point at a fresh database on the same server.
pub fn uri_with_database(uri: &str, database: &str) -> String {
    let (base, query) = match uri.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (uri, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |at| at + 3);
    match base[authority_start..].find('/') {
        Some(at) => format!("{}/{database}{query}", &base[..authority_start + at]),
        None => format!("{base}/{database}{query}"),
    }
}

/// Whether `error` (or a cause of it) says the database cannot be reached: a pool that could not
/// hand out a connection, a client error without SQLSTATE (I/O, a closed connection), class 08
/// (connection exception), or 57P01–57P03 (shutting down, crashed, not yet accepting).
fn is_unreachable(error: &(dyn Error + 'static)) -> bool {
    let mut cause: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(pool) = current.downcast_ref::<deadpool_postgres::PoolError>() {
            return match pool {
                deadpool_postgres::PoolError::Backend(database) => unreachable_database(database),
                _ => true,
            };
        }
        if let Some(database) = current.downcast_ref::<tokio_postgres::Error>() {
            return unreachable_database(database);
        }
        cause = current.source();
    }
    false
}

fn unreachable_database(error: &tokio_postgres::Error) -> bool {
    match error.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
    }
}

/// `uri` with the password removed from its user information (`user:secret@` → `user@`) and
/// from any `password=` query parameter.
pub fn redact(uri: &str) -> String {
    let (scheme, rest) = match uri.find("://") {
        Some(at) => uri.split_at(at + 3),
        None => ("", uri),
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (user_info, host) = authority.split_at(at);
            let user = user_info.split(':').next().unwrap_or_default();
            format!("{user}{host}")
        }
        None => authority.to_string(),
    };
    let (path, parameters) = query_parameters(tail);
    let kept: Vec<&str> = parameters
        .filter(|parameter| !parameter.starts_with("password="))
        .collect();
    format!("{scheme}{authority}{}", with_query(path, &kept))
}

/// `uri` split at its query: what comes before the `?`, and the query's `name=value`
/// parameters (empty ones skipped).
pub(crate) fn query_parameters(uri: &str) -> (&str, impl Iterator<Item = &str>) {
    let (base, query) = uri.split_once('?').unwrap_or((uri, ""));
    (
        base,
        query.split('&').filter(|parameter| !parameter.is_empty()),
    )
}

/// `base` with `parameters` as its query (no `?` without any).
pub(crate) fn with_query(base: &str, parameters: &[&str]) -> String {
    match parameters.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", parameters.join("&")),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn statements_get_generic_plans_and_given_options_are_kept() {
        let plain = Target::parse("postgresql://u@h:1/db").unwrap();
        assert_eq!(
            plain.config().get_options(),
            Some("-c plan_cache_mode=force_generic_plan")
        );
        let given = Target::parse("postgresql://u@h:1/db?options=-c%20search_path%3Dx").unwrap();
        assert_eq!(
            given.config().get_options(),
            Some("-c search_path=x -c plan_cache_mode=force_generic_plan")
        );
        let mut citus = given;
        citus.plan_for(Layout::Citus);
        assert_eq!(
            citus.config().get_options(),
            Some("-c search_path=x -c plan_cache_mode=force_custom_plan")
        );
    }

    use super::*;

    #[test]
    fn another_database_on_the_same_server() {
        assert_eq!(
            uri_with_database("postgresql://u:p@h:5/db?sslmode=disable", "t_1"),
            "postgresql://u:p@h:5/t_1?sslmode=disable"
        );
        assert_eq!(
            uri_with_database("postgresql://u@h:5", "t_2"),
            "postgresql://u@h:5/t_2"
        );
        assert_eq!(
            uri_with_database("postgresql://h/x/y", "t_3"),
            "postgresql://h/t_3"
        );
    }

    #[test]
    fn passwords_never_appear() {
        let cases = [
            (
                "postgresql://u:s3cret@h:5432/db",
                "postgresql://u@h:5432/db",
            ),
            ("postgresql://u@h/db", "postgresql://u@h/db"),
            ("postgres://u:p@ss@h/db", "postgres://u@h/db"),
            (
                "postgresql://h/db?password=s3cret&sslmode=disable",
                "postgresql://h/db?sslmode=disable",
            ),
            ("postgresql://h/db?password=s3cret", "postgresql://h/db"),
            (
                "postgresql://u:x@h1:1,h2:2/db?application_name=a",
                "postgresql://u@h1:1,h2:2/db?application_name=a",
            ),
        ];
        for (uri, expected) in cases {
            assert_eq!(redact(uri), expected, "{uri}");
        }
    }

    #[test]
    fn a_malformed_uri_is_named_without_its_password() {
        let error = Target::parse("postgresql://u:s3cret@h/db?keepalives=sometimes").unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("invalid PostgreSQL URI postgresql://u@h/db?keepalives=sometimes"),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
        let error = Target::parse("postgresql://u:s3cret@h/db?sslmode=sometimes").unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("(postgresql://u@h/db?sslmode=sometimes)"),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
}
