//! Nothing secret leaves the node in a report: every text that goes into the archive passes
//! [`Scrubber::clean`], and the agent's configuration passes [`config`] first.
//!
//! * Values of this process's environment (8 characters or more) are replaced by `<$NAME>`
//!   wherever they appear, whatever printed them: the archive names variables, never their
//!   values. `KFDQ_ALLOCATION`, the container's allocation token, is one of them.
//! * Any run of exactly 32 lowercase hex digits — the shape of an allocation token
//!   (`kfdq::allocation::Token`) — is replaced by `<token>`, wherever it came from (an
//!   allocations file named in a comment, a process's environment quoted in an error). The
//!   allocations file itself is never read.
//! * In the agent's configuration, comments are dropped (the file is parsed and written again)
//!   and the value of every key whose name speaks of a secret (token, secret, password,
//!   credential, auth, key) is replaced by `<redacted>`.

use std::collections::BTreeSet;

/// Shorter values are too common to mean anything (`1`, `C.UTF-8`, `xterm`) and replacing them
/// would garble the text.
const MIN_VALUE_LEN: usize = 8;

/// Key names whose values are secrets.
const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "auth",
    "key",
];

/// The replacements applied to every file of the archive.
pub struct Scrubber {
    /// (value, replacement), longest value first (a value that contains another wins).
    values: Vec<(String, String)>,
    /// Names of the variables whose values were found and replaced.
    pub replaced: BTreeSet<String>,
    /// Tokens replaced.
    pub tokens: usize,
}

impl Scrubber {
    /// A scrubber for `env` (this process's environment).
    pub fn new(env: impl IntoIterator<Item = (String, String)>) -> Scrubber {
        let mut values: Vec<(String, String)> = env
            .into_iter()
            .filter(|(_, v)| v.len() >= MIN_VALUE_LEN)
            .map(|(k, v)| (v, format!("<${k}>")))
            .collect();
        values.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Scrubber {
            values,
            replaced: BTreeSet::new(),
            tokens: 0,
        }
    }

    /// `text` with every environment value and every token-shaped run replaced.
    pub fn clean(&mut self, text: &str) -> String {
        let mut out = text.to_string();
        for (value, name) in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), name);
                self.replaced.insert(name[2..name.len() - 1].to_string());
            }
        }
        let (out, n) = tokens_out(&out);
        self.tokens += n;
        out
    }
}

/// `text` with every run of exactly 32 lowercase hex digits replaced by `<token>`.
fn tokens_out(text: &str) -> (String, usize) {
    let is_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let mut n = 0;
    let mut flush = |run: &mut String, out: &mut String| {
        if run.len() == 32 {
            out.push_str("<token>");
            n += 1;
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if is_hex(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    (out, n)
}

/// The agent's configuration without comments and with every secret-named key's value
/// replaced; `Err` (what to say instead of the file) when it is not TOML, whose text is then
/// left out entirely.
pub fn config(text: &str) -> Result<(String, usize), String> {
    let mut table: toml::Table = text
        .parse()
        .map_err(|_| "the file is not valid TOML (`kfdqd --check` says where); its text is left out, since a comment or a value could not be told apart from a secret".to_string())?;
    let mut redacted = 0;
    redact_table(&mut table, &mut redacted);
    let out = toml::to_string(&table).map_err(|e| format!("writing it again: {e}"))?;
    Ok((out, redacted))
}

fn secret_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| k.contains(w))
}

fn redact_table(t: &mut toml::Table, n: &mut usize) {
    for (k, v) in t.iter_mut() {
        if secret_name(k) {
            *v = toml::Value::String("<redacted>".into());
            *n += 1;
        } else {
            redact_value(v, n);
        }
    }
}

fn redact_value(v: &mut toml::Value, n: &mut usize) {
    match v {
        toml::Value::Table(t) => redact_table(t, n),
        toml::Value::Array(a) => a.iter_mut().for_each(|v| redact_value(v, n)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_values_are_named_not_shown() {
        let mut s = Scrubber::new([
            ("SHORT".to_string(), "1".to_string()),
            ("OUTER".to_string(), "/srv/abc-private/x".to_string()),
            ("INNER".to_string(), "abc-private".to_string()),
        ]);
        let out = s.clean("root /srv/abc-private/x and abc-private, 1 x");
        assert_eq!(out, "root <$OUTER> and <$INNER>, 1 x");
        assert_eq!(
            s.replaced.iter().cloned().collect::<Vec<_>>(),
            ["INNER", "OUTER"]
        );
    }

    #[test]
    fn token_shaped_runs_go_and_other_hex_stays() {
        let tok = "0123456789abcdef0123456789abcdef";
        let sha = format!("{tok}{tok}");
        let (out, n) = tokens_out(&format!("a={tok}; sha {sha}; {}", &tok[..31]));
        assert_eq!(out, format!("a=<token>; sha {sha}; {}", &tok[..31]));
        assert_eq!(n, 1);
    }

    #[test]
    fn secret_keys_and_comments_are_removed_from_the_configuration() {
        let (out, n) = config(
            "# the token is 42\n[agent]\nsocket = \"/run/kfdq/kfdq.sock\"\napi_key = \"k\"\n\n[[class]]\nname = \"latency\"\nauth = { bearer = \"b\" }\n",
        )
        .unwrap();
        assert_eq!(n, 2, "{out}");
        assert!(!out.contains("42") && !out.contains("\"k\"") && !out.contains("bearer"));
        assert!(out.contains("/run/kfdq/kfdq.sock") && out.contains("latency"));
        assert!(config("not = [toml").is_err());
    }
}
