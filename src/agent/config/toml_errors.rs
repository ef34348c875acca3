//! TOML errors in the configuration put in the configuration's words: the table and key at
//! the error, the rule the value breaks (what the key takes, from docs/agent.md), and the
//! parser's own text last, in parentheses. "duplicate key" on `[class]` becomes "classes are
//! `[[class]]`"; "unexpected leading zero" on `socket_mode = 0666` becomes "quote it".

/// What each key of the file takes, as docs/agent.md says.
fn takes(key: &str) -> Option<&'static str> {
    Some(match key {
        "socket" => "an absolute path in quotes, e.g. socket = \"/run/kfdq/kfdq.sock\"",
        "admin_socket" => {
            "an absolute path in quotes, e.g. admin_socket = \"/run/kfdqd/admin.sock\""
        }
        "socket_mode" => {
            "an octal mode in quotes, e.g. socket_mode = \"0660\" (unquoted, TOML reads a number, and a number may not start with 0)"
        }
        "socket_group" | "admin_group" => "a group name in quotes",
        "default_class" => "the name of a configured class, in quotes",
        "release" => "\"cost\" or \"hysteresis\", in quotes",
        "hysteresis_ms"
        | "release_max_hold_ms"
        | "min_preempt_interval_ms"
        | "run_ms"
        | "after_ms" => "a number of milliseconds, e.g. 20",
        "preempt_round_trip_us" => "a number of microseconds 0..=1000000",
        "release_k" => "a number above 0, at most 1000",
        "release_epsilon" => "a number 0 <= e < 1",
        "release_history" => "an integer 1..=1024",
        "release_min_history" => "an integer 1..=release_history",
        "grace_period" => "an integer (units of 1K GPU clocks)",
        "edges" | "direct_edges" | "prepared_edges" | "env" => "true or false, without quotes",
        "lease_ms" => "an integer 100..=60000",
        "max_connections" | "max_connections_per_uid" => "an integer of at least 1",
        "control_requests_per_s" => "a number above 0",
        "listen" => "an address and port in quotes, e.g. listen = \"127.0.0.1:9464\"",
        "allocations" => {
            "the device plugin's allocations file, an absolute path in quotes (default /var/lib/kfdq/allocations.json)"
        }
        "pod_fallback_class" => "the name of a configured class, in quotes",
        "features" => {
            "node-feature-discovery's feature file, an absolute path in quotes, or \"\" for none"
        }
        "activity_us" => "an integer 250..=100000 (µs)",
        "scan_ms" => "an integer 50..=60000 (ms)",
        "name" => "the class's name in quotes",
        "rank" => "an integer 0..=255, unique per class (higher ranks run first)",
        "priority" | "max_priority" => "a KFD queue priority, an integer 0..=15",
        "level" => "none, hold, deactivate or suspend (or 0..=3)",
        "cu_share" => "per mille of each partition's CUs, an integer 1..=1000",
        "window" => "AQL packets in flight per queue, an integer 1..=4096",
        "hw_queues" => "an integer 1..=1024",
        "hint_timeout_ms" => "an integer 1..=60000 (ms)",
        "control" => "\"shim\" or \"tracer\", in quotes",
        "starvation" => "a table: starvation = { run_ms = 10, after_ms = 500 }",
        "match" => {
            "a table of uids, users, gids, groups, cgroups, executables and env, e.g. match = { users = [\"triton\"], env = false }"
        }
        "uids" | "gids" => "a list of integers, e.g. [1000, 1001]",
        "users" | "groups" | "cgroups" | "executables" => {
            "a list of quoted strings, e.g. [\"a\", \"b\"]"
        }
        _ => return None,
    })
}

/// The table header in effect at byte `offset` (`[agent]`, `[[class]]`, ...), if any.
fn table_at(text: &str, offset: usize) -> Option<&str> {
    text[..offset.min(text.len())]
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with('['))
        .map(|l| l.split('#').next().unwrap_or(l).trim())
}

/// The key whose value starts before byte `offset` on its line (`env` in `match = { env =
/// "yes" }` when the error is at `"yes"`).
fn key_before(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let upto = &text[line_start..offset];
    // The error at a key itself (`sockt = 1`): the key is what follows.
    let before = if upto.contains('=') {
        upto
    } else {
        line.split('=').next().unwrap_or("")
    };
    let trimmed = before.trim_end().trim_end_matches('=').trim_end();
    let key: String = trimmed
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == '"')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let key = key.trim_matches('"').to_string();
    (!key.is_empty() && !line.trim_start().starts_with('[')).then_some(key)
}

/// The line (1-based) and the rule for a TOML error at `span` (start offset) with the
/// parser's `message`.
pub(super) fn explain(text: &str, start: Option<usize>, message: &str) -> (usize, String) {
    let message = message.trim();
    let Some(start) = start else {
        return (0, message.to_string());
    };
    let line = line_of(text, start);
    let start = start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let this_line = text[line_start..].lines().next().unwrap_or("");
    let header_here = this_line.trim_start().starts_with('[');
    let table = if header_here {
        Some(this_line.split('#').next().unwrap_or(this_line).trim())
    } else {
        table_at(text, start)
    };
    let class_table = |t: &str| t.trim_matches(|c| c == '[' || c == ']').trim() == "class";
    if let Some(t) = table.filter(|t| class_table(t) && !t.starts_with("[[")) {
        return (
            line,
            format!(
                "{t}: each class is an array-of-tables entry, written [[class]] (double brackets), one per class ({message})"
            ),
        );
    }
    if header_here && message.contains("duplicate key") {
        let t = table.unwrap_or("the table");
        return (
            line,
            format!(
                "{t} appears twice: a table is written once (put all its keys under one {t}); only classes repeat, as [[class]] ({message})"
            ),
        );
    }
    let place = table.map_or(String::new(), |t| format!("{t} "));
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        let rule = takes(field).map_or(String::new(), |r| format!(": {r}"));
        return (
            line,
            format!("{place}needs `{field}`{rule} (docs/agent.md, \"Configuration\")"),
        );
    }
    if message.starts_with("unknown field") {
        // serde's text names the field and the expected ones already.
        return (
            line,
            format!(
                "{place}{message}; a misspelt key would silently do nothing, so unknown keys are errors"
            ),
        );
    }
    match key_before(text, start) {
        Some(key) => match takes(&key) {
            Some(rule) => (line, format!("{place}{key}: takes {rule} ({message})")),
            None => (line, format!("{place}{key}: {message}")),
        },
        None => (line, format!("{place}{message}")),
    }
}

/// The 1-based line of byte `offset` in `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::super::AgentConfig;

    fn error(text: &str) -> String {
        AgentConfig::parse(text, None).unwrap_err().to_string()
    }

    #[test]
    fn toml_errors_name_the_key_and_the_rule() {
        let e = error("[agent]\nsocket_mode = 0666\n");
        assert!(
            e.contains(":2: [agent] socket_mode: takes an octal mode in quotes"),
            "{e}"
        );
        let e =
            error("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nmatch = { env = \"yes\" }\n");
        assert!(e.contains(":5: [[class]] env: takes true or false"), "{e}");
        let e = error("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\n\n[class]\nname = \"b\"\n");
        assert!(
            e.contains(":6: [class]: ") && e.contains("[[class]] (double brackets)"),
            "{e}"
        );
        let e = error("[class]\nname = \"b\"\nrank = 2\npriority = 3\n");
        assert!(
            e.contains(":1: [class]: ") && e.contains("[[class]]"),
            "{e}"
        );
        let e = error("[agent]\nedges = true\n[agent]\nlease_ms = 1000\n");
        assert!(e.contains(":3: [agent] appears twice"), "{e}");
        let e = error("[[class]]\nname = \"a\"\npriority = 3\n");
        assert!(e.contains("needs `rank`: an integer 0..=255"), "{e}");
        let e = error("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nwindow = -1\n");
        assert!(e.contains(":5: [[class]] window: takes AQL packets"), "{e}");
    }
}
